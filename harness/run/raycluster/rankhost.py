"""A rank on another Ray node: the exec prefix of a node in a scenario spread over nodes.

    python -m harness.run.raycluster.rankhost --address ADDR --group NAME --bundle I --mirror DIR -- COMMAND...

The launcher (on bundle 0's node) starts this as it would start `ssh host`: COMMAND is
the node agent around the rank (engines/launch/nodeside.py), with the rank's variables. This
proxy puts a RankHost actor on bundle I of the scenario's placement group, and the actor
runs COMMAND on its node. The proxy then is the rank for the launcher:

  * the rank's stdout and stderr stream back to the proxy's stdout (the rank log);
  * the control channel goes through: lines on the proxy's stdin ("dump") are written
    to the agent's stdin; end-of-file (the launcher stopped the run or died) closes it,
    and the agent stops the rank's group (nodeside.py);
  * the proxy exits as the agent did (same code, or the same signal), so the launcher's
    crash verdict names the rank;
  * files the rank writes under DIR (its error record, heartbeat and activity, its phase
    marks and outputs) are copied back under the same paths here, unless the two nodes
    share DIR's filesystem; the rank reads its brief and model at the same paths as here.

If the proxy dies, its Ray job ends, Ray kills the actor, and the agent, losing its
stdin, stops the rank: nothing outlives the run on either node.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

READ_WAIT_S = 0.2
SIGNALS = {s.value: s.name for s in signal.Signals}


class RankHost:
    """The actor on the rank's node: runs the node agent, buffers its output, mirrors DIR."""

    def __init__(self, command: list[str], mirror: str, marker: str, pushed: dict[str, bytes]):
        self.mirror = Path(mirror)
        self.shared = (self.mirror / marker).exists()  # the proxy's node wrote it: one filesystem
        if not self.shared:
            # the rank's brief and what else it reads from DIR
            for path, data in pushed.items():
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_bytes(data)
        self.started = time.time()
        self.seen: dict[str, float] = {}
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.output = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def _pump(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for chunk in iter(lambda: os.read(stdout.fileno(), 65536), b""):
            with self.lock:
                self.output += chunk

    def read(self) -> tuple[bytes, int | None, dict[str, bytes]]:
        """(output since the last read, the agent's exit status once it ended, files changed in DIR)."""
        status = self.proc.poll()
        if status is None:
            time.sleep(READ_WAIT_S)
        else:
            time.sleep(0.05)  # the last output behind the exit
        with self.lock:
            chunk, self.output = bytes(self.output), bytearray()
        return chunk, status, self._changed()

    def send(self, line: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass

    def _changed(self) -> dict[str, bytes]:
        if self.shared or not self.mirror.is_dir():
            return {}
        changed = {}
        for path in self.mirror.rglob("*"):
            try:
                mtime = path.stat().st_mtime
                if path.is_file() and mtime >= self.started and self.seen.get(str(path)) != mtime:
                    changed[str(path)] = path.read_bytes()
                    self.seen[str(path)] = mtime
            except OSError:
                continue  # written meanwhile: the next read takes it
        return changed


def proxy(args: argparse.Namespace, command: list[str]) -> int:
    import ray
    from ray.util import get_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False, configure_logging=False)
    mirror = Path(args.mirror)
    marker = f".rankhost-{uuid.uuid4().hex}"
    (mirror / marker).touch()
    pushed = {str(p): p.read_bytes() for p in mirror.glob("*.json")}  # spec.json: what the rank reads first
    where = PlacementGroupSchedulingStrategy(get_placement_group(args.group), placement_group_bundle_index=args.bundle)
    host: Any = (
        ray.remote(RankHost)
        .options(num_cpus=0, max_concurrency=4, max_restarts=0, scheduling_strategy=where)
        .remote(command, str(mirror), marker, pushed)
    )
    threading.Thread(target=_channel, args=(ray, host), daemon=True).start()
    try:
        # the log says where the rank ran (a lost node's ranks are named by it)
        print(f"harness rankhost: this rank runs on Ray node {ray.get(host.node.remote())}", flush=True)
        while True:
            chunk, status, files = ray.get(host.read.remote())
            _write(files)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            if status is not None:
                return status
    except ray.exceptions.RayError as exc:
        # the node or the actor is gone: the rank with it
        print(f"harness rankhost: the rank's Ray node was lost: {type(exc).__name__}: {exc}", flush=True)
        return -signal.SIGKILL
    finally:
        (mirror / marker).unlink(missing_ok=True)


def _channel(ray, host) -> None:
    for line in os.fdopen(0, "rb", buffering=0, closefd=False):
        host.send.remote(line)
    ray.get(host.close.remote())


def _write(files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.rankhost")
        tmp.write_bytes(data)
        os.replace(tmp, target)


def exit_as(status: int) -> None:
    # killed by a signal on its node: die of the same one here
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--group", required=True, help="the placement group's name")
    parser.add_argument("--bundle", type=int, required=True)
    parser.add_argument("--mirror", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    exit_as(proxy(args, command))


if __name__ == "__main__":
    main()
