"""A scenario bigger than one machine, on two "hosts": two network namespaces joined
by a veth pair, with addresses from the benchmarking range 198.18.0.0/15 that exist
only inside them. `harness run --devices 2 --nodes nodes.yaml` must run TP2xPP2 (four
ranks) as 2+2 over them, pass, and give exactly the outputs of the one-machine run.
Needs root and iproute2; the namespaces are removed on every path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import OUTPUTS, VERDICT, scenario_dir
from tests.kit import harness_cli, run_meta, run_process, scaled, survivors

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (`ip`) for network namespaces"),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
SCENARIO = "llama-tiny/tp2-pp2"
NET = "198.18.7"  # RFC 2544 benchmarking range: never routed, here only inside the namespaces


def ip(*args: str) -> None:
    result = run_process(["ip", *args], 30, f"ip {' '.join(args)}", capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


@pytest.fixture
def two_hosts(tmp_path):
    """Two namespaces a and b, veth va <-> vb, lo up; yields the nodes file."""
    a, b = f"h7-{os.getpid()}-a", f"h7-{os.getpid()}-b"
    made = []
    try:
        for ns in (a, b):
            ip("netns", "add", ns)
            made.append(ns)
        ip("-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
        for ns, dev, host in ((a, "va", 1), (b, "vb", 2)):
            ip("-n", ns, "addr", "add", f"{NET}.{host}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except RuntimeError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {exc}")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        f"master_addr: {NET}.1\n"
        "nodes:\n"
        f"  - {{name: {a}, exec: [ip, netns, exec, {a}], devices: 2, env: {{GLOO_SOCKET_IFNAME: va}}}}\n"
        f"  - {{name: {b}, exec: [ip, netns, exec, {b}], devices: 2, env: {{GLOO_SOCKET_IFNAME: vb}}}}\n"
    )
    try:
        yield nodes
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def harness_run(reports: Path, run_id: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    result = harness_cli(
        "run",
        SCENARIO,
        "--report-dir",
        str(reports),
        "--run-id",
        run_id,
        "--timeout",
        f"{scaled(300):.0f}",
        *args,
        env={"HARNESS_DEVICE_LOCK_DIR": str(reports / "locks")},
        timeout=900,
        what=f"harness run {SCENARIO} ({run_id})",
    )
    return result, scenario_dir(reports / run_id, SCENARIO)


def test_tp2_pp2_over_two_namespaces_matches_the_single_node_run(two_hosts, tmp_path):
    root_addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert f"{NET}." not in root_addrs  # so a pass means the ranks talked inside the namespaces

    multi, multi_dir = harness_run(tmp_path, "multi", "--devices", "2", "--nodes", str(two_hosts))
    single, single_dir = harness_run(tmp_path, "single", "--devices", "4")
    assert multi.returncode == 0, multi.stdout[-3000:] + multi.stderr[-3000:]
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    v_multi, v_single = (json.loads((d / VERDICT).read_text()) for d in (multi_dir, single_dir))
    assert v_multi["verdict"] == v_single["verdict"] == "pass", v_multi["reason"]
    assert [c["summary"] for c in v_multi["checks"]] == [c["summary"] for c in v_single["checks"]]
    out_multi, out_single = (EngineOutputs.load(d / OUTPUTS) for d in (multi_dir, single_dir))
    assert out_multi.tensors.keys() == out_single.tensors.keys() and out_single.tensors
    for key, tensor in out_single.tensors.items():  # gloo sums two shards: bit-identical, not just close
        assert tensor.dtype == out_multi.tensors[key].dtype and torch.equal(tensor, out_multi.tensors[key]), key
    assert run_meta(tmp_path / "multi")["nodes"] == _node_names(two_hosts)
    assert not survivors(tmp_path / "multi")


def test_a_crash_on_the_second_host_names_the_rank_and_leaves_nothing(two_hosts, tmp_path):
    result, run_dir = harness_run(tmp_path, "crash", "--devices", "2", "--nodes", str(two_hosts), "--fault", "rank-raise@3")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    v = json.loads((run_dir / VERDICT).read_text())
    assert v["verdict"] == "crash" and v["crash"]["rank"] == 3, v["reason"]
    assert "injected failure on rank 3" in v["crash"]["traceback"]
    assert not survivors(tmp_path / "crash")


def test_without_nodes_a_scenario_bigger_than_the_machine_is_unsupported(tmp_path):
    result, run_dir = harness_run(tmp_path, "small", "--devices", "2")
    assert result.returncode == 5, result.stderr  # its only scenario could not run here: nothing was tested
    v = json.loads((run_dir / VERDICT).read_text())
    assert v["verdict"] == "unsupported"
    assert "needs 4 devices, this machine has 2" in v["reason"] and "--nodes" in v["reason"]


def _node_names(nodes_file: Path) -> list[str]:
    return [n["name"] for n in yaml.safe_load(nodes_file.read_text())["nodes"]]
