"""Device slots and leases: concurrent scenarios never share a device.

A machine has `count` device slots (GPUs on CUDA, CPU slots here). A scenario that
needs n devices leases n slots, all or nothing, runs on them, and gives them back.
Each slot is a file in a lock directory shared by every harness process on the
machine (xdist workers, parallel `harness run --jobs N` threads, two users' runs);
holding a slot means holding an exclusive flock(2) on its file. flock locks belong
to an open file description, so two threads of one process exclude each other
too, and the kernel drops them when their holder dies: a crashed or killed harness
never leaves a slot taken.

Every lease can be appended to a lease log (JSON lines: pool, slot, scenario, pid,
acquired, released), which is how the tests prove that no slot was ever held by
two scenarios at once.

Standard library only.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from harness.contract.jsonfile import JSONObject
from harness.contract.launchplan import DEVICE_SLOTS_ENV
from harness.contract.settings.variables import DEVICE_LOCK_DIR, DEVICES, LEASE_LOG

if TYPE_CHECKING:
    from harness.engines.launch import Cluster

DEVICES_ENV = DEVICES.name  # how many slots this machine has
# where the slot files live (one dir per machine)
LOCK_DIR_ENV = DEVICE_LOCK_DIR.name
LEASE_LOG_ENV = LEASE_LOG.name  # append every lease here (JSON lines)
SLOTS_ENV = DEVICE_SLOTS_ENV  # what a rank is told: its run's slots, "0,3"
# how often a waiting lease looks again (other processes release silently)
POLL_S = 0.2


class DeviceError(ValueError):
    """A device configuration the harness cannot use (bad count, unknown kind)."""


def default_count(kind: str) -> int:
    """Slots when nothing is configured: every visible GPU on CUDA; on CPU one slot per
    two cores (a rank of the reference engine keeps about two cores busy), at least 4 so
    a TP2xPP2 scenario fits on a laptop."""
    if kind == "cuda":
        # only on the CUDA path: the CPU path stays import-light
        import torch

        n = torch.cuda.device_count()
        if n == 0:
            raise DeviceError("--device cuda but no CUDA device is visible (check CUDA_VISIBLE_DEVICES / the driver)")
        return n
    return max(4, (os.cpu_count() or 1) // 2)


def configured_count(kind: str, cli_value: int | None = None) -> int:
    """--devices, else $HARNESS_DEVICES, else default_count(kind)."""
    raw = cli_value if cli_value is not None else DEVICES.raw()
    if raw is None or raw == "":
        return default_count(kind)
    try:
        count = int(raw)
    except ValueError:
        raise DeviceError(f"{DEVICES_ENV}={raw!r} is not a number of devices") from None
    if count < 1:
        raise DeviceError(f"the number of devices must be >= 1 (got {count})")
    return count


def default_lock_dir(kind: str) -> Path:
    """One directory per machine, user and device kind, so every harness process on
    the machine sees the same slots."""
    root = DEVICE_LOCK_DIR.raw() or Path(tempfile.gettempdir()) / f"harness-devices-{os.getuid()}"
    return Path(root) / kind


@dataclass
class Lease:
    """Slots held by one scenario; release() (or the holder's death) frees them."""

    pool: DevicePool
    scenario: str
    slots: list[int]
    acquired: float
    _files: list[IO[str]] = field(default_factory=list, repr=False)  # the slots' lock files, held open

    def env(self) -> dict[str, str]:
        """What the ranks of this lease must see: their slots, and on CUDA only their GPUs."""
        ids = ",".join(map(str, self.slots))
        env = {SLOTS_ENV: ids}
        if self.pool.kind == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = self.pool.physical_ids(self.slots)
        return env

    def release(self) -> None:
        if not self._files:
            return
        released = time.time()
        # log before unlocking: the log then never shows a release after the next acquire
        self.pool.log(self, released)
        for f in self._files:
            f.close()  # closing the descriptor drops its flock
        self._files = []
        self.pool.notify_released()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class DevicePool:
    """`count` slots of one device kind on this machine, leased through lock files."""

    def __init__(self, count: int, kind: str = "cpu", lock_dir: Path | None = None, lease_log: Path | None = None):
        if count < 1:
            raise DeviceError(f"the number of devices must be >= 1 (got {count})")
        self.count = count
        self.kind = kind
        self.lock_dir = Path(lock_dir) if lock_dir else default_lock_dir(kind)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        log = lease_log or LEASE_LOG.raw()
        self.lease_log = Path(log) if log else None
        self._released = threading.Condition()

    def physical_ids(self, slots: list[int]) -> str:
        """CUDA_VISIBLE_DEVICES for these slots: slot i is the i-th device the harness
        itself was given (so a harness started with CUDA_VISIBLE_DEVICES=4,5 hands out 4 and 5)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(self.count)]
        if len(ids) < self.count:
            raise DeviceError(f"{self.count} devices configured but CUDA_VISIBLE_DEVICES lists only {len(ids)}: {visible}")
        return ",".join(ids[s] for s in slots)

    def try_lease(self, n: int, scenario: str) -> Lease | None:
        """n free slots now, or None. All or nothing: a partial set is given back at once,
        so two waiters can never each hold half of what the other needs."""
        if n > self.count:
            raise DeviceError(f"{scenario} needs {n} devices; this machine has {self.count}")
        got: list[tuple[int, IO[str]]] = []
        for slot in range(self.count):
            f = open(self.lock_dir / f"slot{slot}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            got.append((slot, f))
            if len(got) == n:
                return Lease(self, scenario, [s for s, _ in got], time.time(), [f for _, f in got])
        for _, held in got:
            held.close()
        return None

    def lease(self, n: int, scenario: str, waiting: Callable[[], object] | None = None) -> Lease:
        """Block until n slots are free. `waiting()` is called once if it has to wait."""
        told = False
        while True:
            got = self.try_lease(n, scenario)
            if got is not None:
                return got
            if waiting is not None and not told:
                waiting()
                told = True
            self.wait_for_release(POLL_S)

    def wait_for_release(self, timeout_s: float) -> None:
        """Sleep until a lease of this process is released, or timeout_s (releases by
        other processes are only seen by looking again)."""
        with self._released:
            self._released.wait(timeout_s)

    def notify_released(self) -> None:
        with self._released:
            self._released.notify_all()

    def log(self, lease: Lease, released: float) -> None:
        if self.lease_log is None:
            return
        lines = "".join(
            json.dumps(
                {
                    "pool": self.kind,
                    "slot": s,
                    "scenario": lease.scenario,
                    "pid": os.getpid(),
                    "acquired": lease.acquired,
                    "released": released,
                }
            )
            + "\n"
            for s in lease.slots
        )
        # one write of a small O_APPEND file: lines of concurrent writers never interleave
        fd = os.open(self.lease_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)


def devices_problem(need: int, pool: DevicePool | None, cluster: Cluster | None = None) -> str | None:
    """Why a run needing `need` devices cannot run here (an `unsupported` reason), or None.
    `pool` None: no leasing; `cluster`: the nodes of --nodes, for runs bigger than a machine."""
    if pool is None or need <= pool.count:
        return None
    if cluster is not None and need <= cluster.ranks:
        return None
    where = (
        f"; the nodes of the nodes file hold {cluster.ranks}"
        if cluster
        else "; a bigger scenario needs more machines (--nodes FILE)"
    )
    return f"needs {need} devices, this machine has {pool.count} (--devices / HARNESS_DEVICES){where}"


def read_lease_log(path: Path) -> list[JSONObject]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def overlapping_leases(records: list[JSONObject]) -> list[tuple[JSONObject, JSONObject]]:
    """Pairs of leases that held the same slot of a pool at the same time (should be none)."""
    clashes = []
    by_slot: dict[tuple[str, int], list[JSONObject]] = {}  # by (pool, slot)
    for r in records:
        by_slot.setdefault((r["pool"], r["slot"]), []).append(r)
    for slot_records in by_slot.values():
        slot_records.sort(key=lambda r: r["acquired"])
        for a, b in zip(slot_records, slot_records[1:]):
            if b["acquired"] < a["released"]:
                clashes.append((a, b))
    return clashes
