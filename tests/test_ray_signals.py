"""`harness run --cluster` meets what a CI user on a shared cluster meets: a cancelled job
(SIGTERM), a cluster that does not answer, an address the installed Ray cannot use
(docs/RELIABILITY.md, "Bad input and faults, third probe")."""

from __future__ import annotations

import importlib.util
import signal

import pytest

from harness.contract import exit_codes
from tests.kit import communicate, harness_cli, outcomes, run_meta, start_harness, summary, wait_until
from tests.test_ray_cluster import _ranks_on_ray

pytest.importorskip("ray")

HANGS = "llama-tiny/tp2-pp1"  # its rank 1 hangs under rank-hang@1
REFUSED = "llama-tiny/tp1-pp1"  # one rank: rank-hang@1 is refused before it starts, an `error` at once


@pytest.mark.e2e
def test_sigterm_on_a_ray_run_is_an_interrupt_with_its_report(tmp_path):
    """SIGTERM once a Ray run's ranks were up printed Ray's own SIGTERM
    handler's stack and aborted (exit 134); summary.md stayed at "2 never ran" though a
    scenario had ended. ray.init takes SIGTERM (a Python handler and its core worker's C++
    one); the harness puts its own back. Want: exit 130, the report of what ended."""
    reports = tmp_path / "reports"
    run = start_harness(
        "run",
        REFUSED,
        HANGS,
        "--cluster",
        "ray:local",
        "--fault",
        "rank-hang@1",
        "--timeout",
        "300",
        "--report-dir",
        str(reports),
        "--run-id",
        "r",
        env={"HARNESS_STALL_WINDOW_S": "0"},
    )
    try:
        wait_until(
            lambda: len(_ranks_on_ray()) >= 2 and outcomes(reports / "r") == {REFUSED: "error"},
            240,
            "the hanging scenario's ranks to start on Ray and the refused one to end",
            proc=run,
        )
        run.send_signal(signal.SIGTERM)
        output, _ = communicate(run, 120, "the Ray run, once signalled")
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == exit_codes.INTERRUPTED, output[-3000:]
    assert "SIGTERM received" not in output and "harness: interrupted" in output, output[-3000:]
    meta = run_meta(reports / "r")
    assert meta["interrupted"] is True and meta["counts"] == {"error": 1} and meta["never_ran"] == [HANGS]
    text = summary(reports / "r")
    assert "1 error, 1 never ran of 2 scenarios" in text and "The run was interrupted" in text and f"`{HANGS}`" in text
    wait_until(lambda: not _ranks_on_ray(), 60, "the cancelled scenario's ranks to end")


def test_an_unreachable_cluster_is_refused_at_once_naming_its_address(tmp_path):
    """`--cluster 127.0.0.1:1` hung (Ray retries its head every ~41 s, no
    error after 4 minutes). Want: a bounded connect, then exit 2 naming the address, before
    a run directory is claimed."""
    result = harness_cli(
        "run",
        "llama-tiny/tp1-pp1",
        "--cluster",
        "127.0.0.1:1",
        "--report-dir",
        str(tmp_path / "r"),
        env={"HARNESS_RAY_CONNECT_S": "5"},
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE, result.stdout + result.stderr
    assert (
        "harness: cannot reach the Ray cluster at 127.0.0.1:1: Connection refused (waited up to 5 s, $HARNESS_RAY_CONNECT_S)"
    ) in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


def test_a_head_that_does_not_answer_is_given_up_after_the_set_time(monkeypatch):
    """The bound itself (a host that drops the connection attempt): the connect waits
    $HARNESS_RAY_CONNECT_S, not Ray's minutes."""
    from harness.run.raycluster import connect

    asked = []

    def silent(address, timeout):
        asked.append((address, timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(connect.socket, "create_connection", silent)
    monkeypatch.setenv("HARNESS_RAY_CONNECT_S", "7.5")
    with pytest.raises(
        connect.ClusterError,
        match=r"cannot reach the Ray cluster at 10\.1\.2\.3:6379: no answer "
        r"\(waited up to 7\.5 s, \$HARNESS_RAY_CONNECT_S\)",
    ):
        connect.check_reachable(connect.parse_cluster("10.1.2.3:6379"))
    assert asked == [(("10.1.2.3", 6379), 7.5)]


@pytest.mark.skipif(importlib.util.find_spec("grpc") is not None, reason="Ray Client's packages are installed here")
def test_ray_client_without_its_package_is_refused_at_once_naming_it(tmp_path):
    """`--cluster ray://host:port` with the `ray` extra installed ended in
    `ValueError: Ray Client requires pip package ray[client]`, a traceback, exit 1, and an
    INCOMPLETE run directory: the extra installs plain `ray`."""
    result = harness_cli(
        "run", "llama-tiny/tp1-pp1", "--cluster", "ray://127.0.0.1:10001", "--report-dir", str(tmp_path / "r"), timeout=120
    )
    assert result.returncode == exit_codes.USAGE, result.stdout + result.stderr
    assert (
        "harness: --cluster ray://127.0.0.1:10001: Ray Client needs the package `ray[client]`, which is not installed here"
    ) in result.stderr and "pip install 'ray[client]'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


def test_auto_without_a_cluster_is_refused_before_a_run_directory(tmp_path):
    """`--cluster auto` with no cluster on the machine left an INCOMPLETE
    run directory."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        canonicalize_bootstrap_address("auto")
        pytest.skip("a Ray cluster runs on this machine")
    except ConnectionError:
        pass
    result = harness_cli(
        "run",
        "llama-tiny/tp1-pp1",
        "--cluster",
        "auto",
        "--report-dir",
        str(tmp_path / "r"),
        env={"RAY_ADDRESS": None},
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE, result.stdout + result.stderr
    assert "harness: --cluster auto: no Ray cluster runs on this machine" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()
