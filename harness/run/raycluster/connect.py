"""Which Ray cluster a run uses, and the connection to it.

    ray:local         a one-node cluster started for this run (this machine's device slots)
    auto | ray        the cluster this machine already belongs to (`ray start` ran here)
    ray://HOST:PORT   a cluster through Ray Client
    HOST:PORT         a cluster's GCS address (what `ray start --head` prints)

A node offers the harness its device slots as a custom resource (`harness_device`) on
CPU, and its GPUs on CUDA: `ray start --resources '{"harness_device": 4}'`.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from harness.contract.settings.variables import (
    CLUSTER,
    COMPILE_CACHE,
    RANK_POOL,
    RAY_CONNECT_S,
    SOAK_MARK,
    STALL_WINDOW_S,
    TEST_TOKEN,
    VLLM_AOT_LOAD,
    VLLM_FORK,
)
from harness.inputs.scenarios.schema import ScenarioError

RAY_EXTRA_HINT = "pip install 'harness[ray]' (Ray 2.60 or newer; it leaves the installed torch as it is)"


# what the driver's environment says of how a scenario runs, sent to the node with it
SCENARIO_SETTINGS = (STALL_WINDOW_S, RANK_POOL, COMPILE_CACHE, VLLM_FORK, VLLM_AOT_LOAD, TEST_TOKEN, SOAK_MARK)


class ClusterError(ScenarioError):
    """A --cluster the harness cannot use: a value it cannot read, Ray missing, or no node able to run
    (a usage error: nothing ran)."""


@dataclass(frozen=True)
class ClusterChoice:
    """A --cluster value parsed: which Ray cluster the run goes to."""

    # None: a local cluster started for the run; else what ray.init() is given
    address: str | None

    @property
    def local(self) -> bool:
        return self.address is None

    def describe(self) -> str:
        return "a local Ray cluster started for this run" if self.local else f"the Ray cluster at {self.address}"


def parse_cluster(text: str) -> ClusterChoice:
    value = text.strip()
    if value in ("ray:local", "local"):
        return ClusterChoice(None)
    if value in ("auto", "ray", "ray:auto"):
        return ClusterChoice("auto")
    if value.startswith("ray://"):
        return ClusterChoice(value)
    if value.startswith("ray:"):
        value = value.removeprefix("ray:")
    host, sep, port = value.rpartition(":")
    if sep and host and port.isdigit():
        return ClusterChoice(value)
    raise ClusterError(f"--cluster {text!r}: expected ray:local, auto, ray://HOST:PORT or HOST:PORT (a Ray GCS address)")


def cluster_option(given: str | None) -> str | None:
    """--cluster (else $HARNESS_CLUSTER), checked before anything runs: a value this module
    reads, Ray installed with what the address needs, and a cluster that answers there.
    None: no cluster, the run stays on this machine."""
    text = given or CLUSTER.raw()
    if text is None:
        return None
    cluster = parse_cluster(text)
    import_ray()
    check_reachable(cluster)
    return text


def check_reachable(cluster: ClusterChoice) -> None:
    """ClusterError, within $HARNESS_RAY_CONNECT_S, unless `spec`'s cluster can be asked:
    Ray's own connect retries an unreachable head without end, and
    Ray Client (ray://) needs a package plain `ray` does not bring."""
    if cluster.local:
        return
    address = cluster.address or ""
    if address.startswith("ray://"):
        missing = _ray_client_missing()
        if missing:
            raise ClusterError(
                f"--cluster {address}: Ray Client needs the package `ray[client]`, which is not installed "
                f"here ({missing}): pip install 'ray[client]'; or give the cluster's GCS address HOST:PORT "
                "(what `ray start --head` prints), which plain `ray` reaches"
            )
        address = address.removeprefix("ray://")
    elif address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            address = canonicalize_bootstrap_address("auto") or ""
        except (ConnectionError, ValueError) as exc:
            raise ClusterError(
                f"--cluster auto: no Ray cluster runs on this machine ({str(exc).split('.')[0]}): "
                "`ray start --head` starts one, ray:local starts one for the run"
            ) from None
    host, _, port = address.rpartition(":")
    wait = RAY_CONNECT_S.number() or 20.0
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=wait).close()
    except (OSError, ValueError) as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (getattr(exc, "strerror", None) or str(exc))
        raise ClusterError(
            f"cannot reach {cluster.describe()}: {why} (waited up to {wait:g} s, "
            f"${RAY_CONNECT_S.name}); is the cluster up (`ray status`), and is {address} its head's "
            "address?"
        ) from None


def _ray_client_missing() -> str | None:
    """Why Ray Client cannot run here (its extra's packages missing), or None."""
    try:
        from ray._private.utils import get_ray_client_dependency_error
    except ImportError:
        # another Ray's layout: the package Ray Client needs most
        import importlib.util

        return None if importlib.util.find_spec("grpc") else "no module named 'grpc'"
    error = get_ray_client_dependency_error()
    return str(error) if error is not None else None


def import_ray():
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--cluster needs Ray, which is not installed here: {RAY_EXTRA_HINT}") from None
    return ray


@contextmanager
def connected(cluster: ClusterChoice, resource: str, local_devices: int) -> Iterator[object]:
    """The ray module, connected to `spec`'s cluster while the block runs. A connection
    made here is closed here (a local cluster stops with it); one the caller already
    holds (ray.init in this process) is used as is."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    _init(ray, cluster, resource, local_devices)
    try:
        yield ray
    finally:
        ray.shutdown()


def stay_connected(cluster: ClusterChoice, resource: str, local_devices: int):
    """The ray module, connected to `spec`'s cluster until this process exits: for a way in
    that asks for one scenario at a time (the pytest plugin), so Ray's workers, and the rank
    pools in them, serve every scenario of the session."""
    ray = import_ray()
    if not ray.is_initialized():
        _init(ray, cluster, resource, local_devices)
        atexit.register(ray.shutdown)
    return ray


def _init(ray, cluster: ClusterChoice, resource: str, local_devices: int) -> None:
    with sigterm_kept():
        _connect(ray, cluster, resource, local_devices)


@contextmanager
def sigterm_kept() -> Iterator[None]:
    """ray.init takes SIGTERM twice over: a Python handler (`sys.exit(15)`) and, in its core
    worker, a C++ failure-signal handler that prints its own stack and aborts (exit 134). A CI
    job cancelled by SIGTERM then lost its interrupt report. The handler that was in place
    (the harness's SIGTERM-as-Ctrl-C) is put back, at the OS level too, once Ray is connected."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _connect(ray, cluster: ClusterChoice, resource: str, local_devices: int) -> None:
    quiet = {"log_to_driver": False, "configure_logging": False}
    if cluster.local:
        # the harness's tasks ask for no CPU (the device slots are what they hold), so one
        # CPU keeps Ray from starting a worker per core of a small machine
        resources = {} if resource == "GPU" else {resource: local_devices}
        # "local": a cluster of its own, as `ray:local` says; with no address ray.init joins the
        # latest cluster started on this machine (/tmp/ray/ray_current_cluster), someone else's,
        # and refuses num_cpus there (ValueError)
        ray.init(address="local", num_cpus=1, resources=resources, include_dashboard=False, **quiet)
    else:
        # bounded: ray.init retries an unreachable head without end
        check_reachable(cluster)
        try:
            ray.init(address=cluster.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:  # ValueError: Ray Client's missing package
            raise ClusterError(f"cannot reach {cluster.describe()}: {exc}; is the cluster up (`ray status`)?") from None


def driver_env() -> dict[str, str | None]:
    """Variables a scenario must run under on the node as it would here (None: unset here, so
    unset there). OMP_NUM_THREADS, because Ray sets its own in its workers (1 would change the
    ranks' thread count, and with it the bits of a CPU reduction); the harness's settings of
    how a scenario runs (the stall window, the rank pool, ...), because Ray's workers have the
    environment their node was started with, not the driver's. Paths (caches, interpreters)
    stay the node's own; CUDA_VISIBLE_DEVICES is Ray's to set (the GPUs the task holds)."""
    return {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", *(v.name for v in SCENARIO_SETTINGS))}
