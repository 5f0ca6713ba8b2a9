"""`harness run --cluster`: scenarios as Ray work (harness/run/raycluster).

The unit tests read specs, placement and the file transfer without Ray running. The
end-to-end test starts ONE `ray.cluster_utils.Cluster` on this machine: a head that
offers no device slot and two simulated nodes of 2 slots each (one CPU each, no
dashboard), and runs every cluster check against it in one test function, in order:
the same verdicts and bit-identical metrics as a local run, a 4-rank scenario across
both nodes, pytest items placed by Ray (--harness-cluster), a killed driver leaving no
rank, and a node whose raylet is killed ending its scenario `crash`. One function, not one per check: under `pytest -n 2` checks in
separate functions would be dealt to both workers, each starting a cluster of its own
on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from harness.contract.verdict import Verdict
from harness.run.raycluster.connect import ClusterError, cluster_option, parse_cluster
from harness.run.raycluster.placement import Capacity, bundles, strategy
from harness.run.raycluster.transfer import pack, unpack_scenario
from tests.kit import communicate, harness_cli, pytest_cli, start_harness, verdicts, wait_process, wait_until
from tests.kit.present import present

PAIRS = ["llama-tiny/tp1-pp1", "llama-tiny/tp2-pp1", "llama-tiny/tp1-pp2", "llama-tiny/tp2-pp2"]
ACROSS_NODES = "llama-tiny/tp2-pp2"  # 4 ranks: bigger than either 2-slot node


# --- without Ray running -------------------------------------------------------------


def test_cluster_specs_read_as_documented():
    assert parse_cluster("ray:local").local
    assert parse_cluster("auto").address == "auto"
    assert parse_cluster("ray://head:10001").address == "ray://head:10001"
    assert parse_cluster("10.0.0.1:6379").address == "10.0.0.1:6379"
    assert parse_cluster("ray:10.0.0.1:6379").address == "10.0.0.1:6379"
    with pytest.raises(ClusterError, match="expected ray:local, auto"):
        parse_cluster("slurm")


def test_without_ray_the_option_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ClusterError, match=r"pip install 'harness\[ray\]'"):
        cluster_option("ray:local")
    assert cluster_option(None) is None  # no cluster asked for: Ray is not needed


def test_the_drivers_settings_of_a_run_go_to_the_node(monkeypatch):
    from harness.run.raycluster.connect import driver_env

    monkeypatch.setenv("HARNESS_STALL_WINDOW_S", "0")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("HARNESS_CACHE", "/driver/only")
    sent = driver_env()
    assert sent["HARNESS_STALL_WINDOW_S"] == "0" and sent["OMP_NUM_THREADS"] is None  # unset here: unset there
    assert "HARNESS_CACHE" not in sent  # a path of this machine: the node keeps its own


def test_a_scenario_packs_onto_one_node_when_it_fits():
    cap = Capacity({"a": 2, "b": 2})
    assert bundles(2, "harness_device") == [{"harness_device": 1}] * 2
    assert strategy(2, cap) == "STRICT_PACK"
    assert strategy(4, cap) == "PACK"  # spread over as few nodes as it takes
    assert cap.problem(4, "harness_device") is None
    assert "needs 5 devices" in present(cap.problem(5, "harness_device"))


def test_files_come_back_with_local_paths_and_a_valid_digest(tmp_path):
    node_dir = tmp_path / "node" / "scenarios" / "s__tp1"
    (node_dir / "logs").mkdir(parents=True)
    (node_dir / "logs" / "rank0.log").write_text("hello\n")
    (node_dir / "spec.json").write_text(json.dumps({"output_dir": str(node_dir / "outputs")}))
    Verdict("s/tp1", "crash", "rank 0 crashed", logs={"0": str(node_dir / "logs" / "rank0.log")}).save(node_dir / "verdict.json")
    local = tmp_path / "run" / "scenarios" / "s__tp1"
    verdict = unpack_scenario(pack(node_dir), local, str(node_dir))
    assert verdict.verdict == "crash" and verdict.logs["0"] == str(local / "logs" / "rank0.log")
    assert Verdict.load(local / "verdict.json").verdict == "crash"  # digest remade over the new paths
    assert json.loads((local / "spec.json").read_text())["output_dir"] == str(local / "outputs")
    assert (local / "logs" / "rank0.log").read_text() == "hello\n"


@pytest.mark.e2e  # starts a process (a shell), no Ray
def test_a_rank_host_without_a_shared_filesystem_sends_files_both_ways(tmp_path):
    from harness.run.raycluster.rankhost import RankHost

    mirror = tmp_path / "scenario"  # bundle 0's directory, as the remote node would not have it
    spec = mirror / "spec.json"
    write = f"cat {spec} > {mirror}/logs/rank2.error.json; echo rank output; exit 3"
    host = RankHost(["sh", "-c", f"mkdir -p {mirror}/logs; {write}"], str(mirror), ".marker-not-here", {str(spec): b"{}"})
    output, status = b"", None
    files: dict = {}
    deadline = time.monotonic() + 10
    while status is None and time.monotonic() < deadline:
        chunk, status, changed = host.read()
        output, files = output + chunk, {**files, **changed}
    assert status == 3 and b"rank output" in output
    assert files[str(mirror / "logs" / "rank2.error.json")] == b"{}"  # the brief went out, the record came back


# --- one simulated two-node cluster ----------------------------------------------------


@pytest.fixture(scope="module")
def two_nodes():
    """A head without device slots and two nodes of 2 slots: what a scenario runs on is
    always a node this test may kill. Every process of it is gone after the module."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            # a killed raylet is declared dead in ~2 s instead of ~15 s
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    nodes = [cluster.add_node(num_cpus=1, resources={"harness_device": 2}) for _ in range(2)]
    pids = _cluster_pids(cluster)
    try:
        cluster.wait_for_nodes()
        yield cluster, nodes
    finally:
        try:
            cluster.shutdown()
        finally:
            for pid in pids:  # what shutdown could not reach (a node already half dead)
                _kill(pid)


@pytest.mark.e2e
def test_two_node_ray_cluster(two_nodes, tmp_path):
    cluster, nodes = two_nodes
    address = cluster.address
    same_verdicts_and_metrics_as_a_local_run(address, tmp_path)
    pytest_items_run_on_the_cluster(address, tmp_path)
    killed_driver_leaves_no_rank(address, tmp_path)
    lost_node_ends_its_scenario_crash(address, nodes, tmp_path)
    a_local_run_beside_it_starts_its_own(tmp_path)


def a_local_run_beside_it_starts_its_own(tmp_path: Path) -> None:
    """`--cluster ray:local` while another Ray cluster runs on the machine (this module's, or a
    parallel test's): ray.init without an address joined it and refused num_cpus (ValueError)."""
    own = harness_cli("run", "llama-tiny/tp1-pp1", "--cluster", "ray:local", "--report-dir", str(tmp_path / "own"), timeout=300)
    assert {s: v["verdict"] for s, v in verdicts(_run_dir(own)).items()} == {"llama-tiny/tp1-pp1": "pass"}


def same_verdicts_and_metrics_as_a_local_run(address: str, tmp_path: Path) -> None:
    local = _run_dir(harness_cli("run", *PAIRS, "--report-dir", str(tmp_path / "local"), timeout=300))
    on_ray = _run_dir(harness_cli("run", *PAIRS, "--cluster", address, "--report-dir", str(tmp_path / "ray"), timeout=300))
    here, there = verdicts(local), verdicts(on_ray)
    assert (
        {s: v["verdict"] for s, v in there.items()} == {s: v["verdict"] for s, v in here.items()} == dict.fromkeys(PAIRS, "pass")
    )
    for scenario in PAIRS:  # every check's every metric, bit for bit
        assert there[scenario]["checks"] == here[scenario]["checks"], scenario
    logs = there[ACROSS_NODES]["logs"]
    assert len(logs) == 4 and all(Path(p).is_file() and str(on_ray) in p for p in logs.values())
    remote = [r for r, p in sorted(logs.items()) if "runs on Ray node" in Path(p).read_text()]
    assert remote == ["2", "3"], "ranks 0-1 on bundle 0's node, 2-3 through the rank host on the other"


def pytest_items_run_on_the_cluster(address: str, tmp_path: Path) -> None:
    items = [f"scenarios/llama-tiny.yaml::{case}" for case in ("tp1-pp1", "tp2-pp1")]
    done = pytest_cli(
        *items,
        "-p",
        "no:cacheprovider",
        "--harness-cluster",
        address,
        "--harness-report-dir",
        str(tmp_path / "pytest"),
        timeout=300,
        what="pytest --harness-cluster",
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
    (run_dir,) = (tmp_path / "pytest").glob("pytest-*")
    assert all(Path(v["logs"]["0"]).is_file() for v in verdicts(run_dir).values())


def killed_driver_leaves_no_rank(address: str, tmp_path: Path) -> None:
    driver = _start_hanging(address, "llama-tiny/tp2-pp1", tmp_path / "killed")
    try:
        wait_until(lambda: len(_ranks_on_ray()) >= 2, 120, "the ranks of the scenario to start on a Ray node")
    finally:
        driver.kill()
        wait_process(driver, 30, "the killed driver")
    wait_until(lambda: not _ranks_on_ray(), 60, "Ray to stop the killed driver's ranks on its node")


def lost_node_ends_its_scenario_crash(address: str, nodes: list, tmp_path: Path) -> None:
    driver = _start_hanging(address, "llama-tiny/tp2-pp1", tmp_path / "lost")
    try:
        wait_until(lambda: len(_ranks_on_ray()) >= 2, 120, "the ranks of the scenario to start on a Ray node")
        raylet = _raylet_of(_ranks_on_ray()[0], nodes)
        os.kill(raylet, signal.SIGKILL)
        output, _ = communicate(driver, 120, "the driver, once the node is lost")
    finally:
        if driver.poll() is None:
            driver.kill()
    verdict = verdicts(_run_dir_in(tmp_path / "lost"))["llama-tiny/tp2-pp1"]
    assert verdict["verdict"] == "crash", output
    assert "node" in verdict["reason"] and "rank" in verdict["reason"] and "lost" in verdict["reason"]
    wait_until(lambda: not _ranks_on_ray(), 60, "the lost node's ranks to end")


# --- helpers ---------------------------------------------------------------------------


def _start_hanging(address: str, scenario: str, reports: Path):
    """A scenario whose rank 1 hangs (no stall detector, a long timeout): it runs until
    the test kills something."""
    return start_harness(
        "run",
        scenario,
        "--cluster",
        address,
        "--fault",
        "rank-hang@1",
        "--timeout",
        "300",
        "--report-dir",
        str(reports),
        env={"HARNESS_STALL_WINDOW_S": "0"},
    )


def _run_dir(done) -> Path:
    assert done.returncode == 0, done.stdout + done.stderr
    return _run_dir_in(Path(done.stdout.split("report: ")[-1].strip()).parent.parent)


def _run_dir_in(reports: Path) -> Path:
    runs = [p for p in reports.iterdir() if p.is_dir() and p.name != "history"]
    assert len(runs) == 1, runs
    return runs[0]


def _ranks_on_ray() -> list[int]:
    """Live processes whose stdout is a rank log in a Ray node's scenario directory."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            target = os.readlink(f"/proc/{pid}/fd/1")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "/harness-ray-" in target and target.endswith(".log") and state not in ("Z", "X"):
            found.append(int(pid))
    return found


def _raylet_of(pid: int, nodes: list) -> int:
    """The raylet of the simulated node a process runs under (its first raylet ancestor)."""
    raylets = {_pid_of(node, "raylet") for node in nodes}
    while pid > 1:
        if pid in raylets:
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError(f"no raylet of {sorted(raylets)} above the rank")


def _pid_of(node, kind: str) -> int:
    return node.all_processes[kind][0].process.pid


def _cluster_pids(cluster) -> list[int]:
    return [info.process.pid for node in cluster.list_all_nodes() for infos in node.all_processes.values() for info in infos]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    time.sleep(0)
