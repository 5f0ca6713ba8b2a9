"""The rank pool (harness/engines/launch/pool.py, zygote.py): ranks forked from a process that
imported the engine once. tests/test_launch.py runs the launcher's crash, hang, env and
Ctrl-C cases both ways (fresh and pooled); these are the pool's own promises: one zygote
per import-time environment and reused, a refusal that falls back to fresh ranks and
says why, exits seen without reaping, and nothing left behind when the pool closes."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from harness.contract import exit_codes
from harness.contract.launchplan import LaunchPlan
from harness.engines.launch import pool, run_ranks
from harness.engines.launch.pool import module_argv, spawn_rank
from tests.kit import assert_no_survivors, communicate, scaled, start_harness, survivors, verdict_of, wait_until
from tests.kit.procs import alive, pids_in
from tests.kit.ranks import POOL_PRELOAD

pytestmark = pytest.mark.e2e  # starts real zygotes and ranks

MODULE = [sys.executable, "-m", "tests.ranks.allreduce"]


@pytest.fixture(autouse=True)
def fresh_pool():
    """Each test starts with no zygote and leaves none behind."""
    pool.close_all()
    pool._refused.clear()
    yield
    pool.close_all()


def run_ok(tmp_path: Path, name: str, preload=POOL_PRELOAD, on_request=(), **env) -> set[int]:
    """A world-2 run that must pass; returns the pids of its ranks' parents. Every run
    uses the same PID_DIR (emptied first): the environment is what selects a zygote."""
    pids = tmp_path / "pids"
    shutil.rmtree(pids, ignore_errors=True)
    pids.mkdir()
    plan = LaunchPlan(
        2, MODULE, {"RANK_MODE": "ok", "PID_DIR": str(pids), **env}, preload=list(preload), preload_on_request=list(on_request)
    )
    out = run_ranks(plan, tmp_path / f"{name}-logs", timeout_s=scaled(60))
    assert out.status == "ok", out
    assert_no_survivors(pids, 2)
    return {int((pids / f"parent{r}").read_text()) for r in range(2)}


def test_one_zygote_serves_every_run_of_an_environment(tmp_path):
    first = run_ok(tmp_path, "a")
    second = run_ok(tmp_path, "b")
    assert len(first) == 1 and first == second and os.getpid() not in first  # one zygote, both runs
    assert len(pool._zygotes) == 1
    other = run_ok(tmp_path, "c", OMP_NUM_THREADS="1")  # read at import: another zygote
    assert other != first and len(pool._zygotes) == 2


def test_a_module_asked_for_by_a_run_is_imported_by_the_zygote_once_and_only_then(tmp_path, capfd):
    """preload_on_request: a run that does not ask for the module shares the zygote and
    never imports it; the first run that asks has the zygote import it before forking its
    ranks; later ones find it imported (the compile-only inductor import of the reference
    engine); one that cannot be imported starts its ranks fresh, and the run still passes."""
    log = tmp_path / "imports"
    log.mkdir()
    asked = ("tests.ranks.imported_on_request",)
    eager = run_ok(tmp_path, "a", IMPORT_LOG_DIR=str(log))
    assert not list(log.iterdir())  # not asked for: not imported
    compiled = run_ok(tmp_path, "b", on_request=asked, IMPORT_LOG_DIR=str(log))
    again = run_ok(tmp_path, "c", on_request=asked, IMPORT_LOG_DIR=str(log))
    assert eager == compiled == again and len(pool._zygotes) == 1  # one zygote serves them all
    assert [p.name for p in log.iterdir()] == [f"imported-by-{next(iter(eager))}"]  # by the zygote, once
    assert run_ok(tmp_path, "d", on_request=("no_such_module_anywhere",), IMPORT_LOG_DIR=str(log)) == {os.getpid()}
    said = capfd.readouterr().err
    assert said.count("ranks start fresh, not from the rank pool: importing no_such_module_anywhere failed") == 1, said


def test_a_zygote_left_with_a_thread_refuses_and_ranks_start_fresh(tmp_path, capfd):
    parents = run_ok(tmp_path, "a", preload=(*POOL_PRELOAD, "tests.ranks.starts_a_thread"))
    assert parents == {os.getpid()}  # started fresh by the launcher
    assert "ranks start fresh, not from the rank pool" in capfd.readouterr().err
    assert "thread(s) running beyond the math libraries' own pools" in next(iter(pool._refused.values()))


def test_a_preload_that_fails_to_import_refuses_and_ranks_start_fresh(tmp_path, capfd):
    parents = run_ok(tmp_path, "a", preload=("no_such_module_anywhere",))
    assert parents == {os.getpid()}
    assert "No module named 'no_such_module_anywhere'" in capfd.readouterr().err


def test_pool_off_starts_ranks_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv(pool.OFF_ENV, "0")
    assert run_ok(tmp_path, "a") == {os.getpid()} and not pool._zygotes


def spawn_hanging(tmp_path: Path, mode: str = "hang"):
    """One world-1 rank forked from the pool, alone in a new process group."""
    pids = tmp_path / "hanging"
    pids.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "0",
        "RANK_MODE": mode,
        "RANK_TARGET": "0",
        "PID_DIR": str(pids),
    }
    rank = spawn_rank(MODULE, list(POOL_PRELOAD), env, tmp_path / "rank0.log", 0)
    assert rank is not None
    return rank, pids


def wait_gone(pid_dir: Path) -> None:
    """A SIGKILL is delivered asynchronously: wait until every process in pid_dir ended."""
    wait_until(lambda: not any(alive(pid) for pid in pids_in(pid_dir)), scaled(10), "the killed processes to end")


def test_an_exit_is_seen_without_reaping(tmp_path):
    rank, _ = spawn_hanging(tmp_path, "exit3")
    wait_until(lambda: rank.peek_exit() is not None, scaled(60), "the forked rank to exit")
    assert rank.peek_exit() == (3, None)
    assert Path(f"/proc/{rank.pid}").exists() and not alive(rank.pid)  # a zombie: its pid is still held
    assert os.getpgid(rank.pid) == rank.pid  # its own group, as asked (pgid 0)
    os.killpg(rank.pid, signal.SIGKILL)  # the `sleep` it started (the launcher's cleanup, here by hand)
    assert rank.wait(scaled(10)) == 3 and rank.returncode == 3
    wait_gone(tmp_path / "hanging")
    wait_until(lambda: not Path(f"/proc/{rank.pid}").exists(), scaled(10), "the zygote to reap the rank")


def test_closing_the_pool_leaves_nothing(tmp_path):
    rank, pids = spawn_hanging(tmp_path)
    wait_until(lambda: (pids / "ready0").exists(), scaled(60), "the forked rank to get ready")
    # ps shows the rank's own command, not the zygote's
    assert Path(f"/proc/{rank.pid}/cmdline").read_bytes().startswith(" ".join(MODULE).encode())
    zygote = next(iter(pool._zygotes.values())).proc
    pool.close_all()
    assert zygote.poll() is not None
    assert_no_survivors(pids, 1)


def test_only_python_module_commands_are_pooled():
    assert module_argv(["/py", "-m", "pkg.mod", "spec.json"]) == ("/py", ["pkg.mod", "spec.json"])
    assert module_argv(["/py", "script.py"]) is None and module_argv(["vllm", "serve"]) is None


def test_a_zygote_with_a_running_rank_is_never_closed_to_make_room(tmp_path, monkeypatch):
    monkeypatch.setattr(pool, "MAX_ZYGOTES", 1)
    rank, pids = spawn_hanging(tmp_path)
    wait_until(lambda: (pids / "ready0").exists(), scaled(60), "the forked rank to get ready")
    run_ok(tmp_path, "other", OMP_NUM_THREADS="1")  # a second zygote, over the limit
    assert len(pool._zygotes) == 2 and rank.peek_exit() is None  # the busy one stayed, its rank runs
    os.killpg(rank.pid, signal.SIGKILL)  # the rank and the `sleep` it started
    assert rank.wait(scaled(10)) == -signal.SIGKILL
    wait_gone(pids)
    run_ok(tmp_path, "third", OMP_NUM_THREADS="3")  # now the idle ones make room
    assert len(pool._zygotes) == 1


def test_the_reference_engines_ranks_are_pooled_on_cpu_only():
    """The built-in engine's gain (docs/BENCHMARKS.md, "The rank pool") holds only while
    its preload list is set and a zygote accepts it: a torch upgrade whose imports start
    a thread would otherwise turn the pool off with nothing but a line on stderr."""
    from harness.contract.runbrief import RunBrief
    from harness.engines.reference import ReferenceEngine

    def plan(device, compile=False):
        settings = {"tp": 2, "pp": 1, "compile": compile}
        brief = RunBrief("t/x", "reference", "/m", "float32", settings, [], "/o", device=device)
        return ReferenceEngine().launch_plan(brief, "/s.json")

    cpu, compiled = plan("cpu"), plan("cpu", compile=True)
    assert module_argv(cpu.argv) is not None and "torch" in cpu.preload
    assert compiled.preload == cpu.preload and cpu.preload_on_request == [] and compiled.preload_on_request
    assert (
        plan("cuda").preload == plan("cuda", compile=True).preload_on_request == []
    )  # CUDA ranks start fresh (docs/ENGINES.md section 3)
    # what a compile rank has the zygote import too passes the same checks (refused by raising)
    everything = (*compiled.preload, *compiled.preload_on_request)
    zygote = pool.Zygote(sys.executable, everything, {**os.environ, **compiled.env})
    zygote.close()


def test_the_hf_engines_rank_is_pooled_on_cpu_only():
    """The hf engine's rank imports torch and transformers (13 CPU-s a rank) from its
    zygote: transformers' own imports start SciPy's OpenBLAS and pyarrow's jemalloc threads,
    which its launch environment keeps from starting, or the zygote would refuse."""
    pytest.importorskip("transformers")
    from harness.contract.runbrief import RunBrief
    from harness.engines.hf import HfEngine

    def plan(device):
        return HfEngine().launch_plan(
            RunBrief("t/x", "hf", "/m", "float32", {"tp": 1, "pp": 1}, [], "/o", device=device), "/s.json"
        )

    cpu = plan("cpu")
    assert module_argv(cpu.argv) is not None and "transformers" in cpu.preload
    assert plan("cuda").preload == []
    zygote = pool.Zygote(sys.executable, tuple(cpu.preload), {**os.environ, **cpu.env})  # refuses by raising
    zygote.close()


def test_the_running_tests_name_does_not_choose_a_zygote(tmp_path):
    """pytest names each test in PYTEST_CURRENT_TEST: a rank gets it at its fork, and the
    zygote is chosen without it (one zygote for a whole test session, not one a test)."""
    first = run_ok(tmp_path, "a", PYTEST_CURRENT_TEST="tests/x.py::test_one (call)")
    second = run_ok(tmp_path, "b", PYTEST_CURRENT_TEST="tests/x.py::test_two (call)")
    assert first == second and os.getpid() not in first and len(pool._zygotes) == 1


def zygote_with_a_rank(harness_pid: int) -> int | None:
    """The pid of the harness's zygote once a rank it forked runs the rank's program:
    retitled with its own command (zygote.show_command) and asleep in its injected hang.
    A zygote killed between its fork and telling the harness the rank's pid would leave
    the harness nothing to lose: it starts the rank fresh instead, which then hangs as
    told (seen once under CI load when this waited only for the fork)."""
    children = {int(c) for c in Path(f"/proc/{harness_pid}/task/{harness_pid}/children").read_text().split()}
    for pid in children:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            forked = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            running = [
                c
                for c in forked
                if b"zygote.py" not in Path(f"/proc/{c}/cmdline").read_bytes()
                and Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
            ]
        except OSError:
            continue
        if b"zygote.py" in cmdline and running:
            return pid
    return None


def test_a_zygote_killed_mid_scenario_is_the_harnesss_error_not_an_engine_crash(tmp_path):
    """A zygote killed mid-scenario takes its rank along (PDEATHSIG); that is the harness's
    own helper failing, so the verdict is `error` naming the zygote, never `crash` of rank 0."""
    reports = tmp_path / "reports"
    proc = start_harness(
        "run",
        "llama-tiny/tp1-pp1",
        "--jobs",
        "1",
        "--report-dir",
        str(reports),
        "--run-id",
        "r",
        "--env",
        "HARNESS_RANK_FAULT=hang@0",
        "--timeout",
        "3600",
    )  # the rank waits to be killed
    try:
        wait_until(lambda: zygote_with_a_rank(proc.pid) is not None, 120, "the zygote to fork the scenario's rank", proc=proc)
        time.sleep(0.5)  # margin for the zygote's answer to reach the harness (it is sent right after the fork)
        zygote = zygote_with_a_rank(proc.pid)  # the same one: its rank waits to be killed
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        out, _ = communicate(proc, 300, "the harness to end the scenario")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_codes.NOT_AS_EXPECTED, out
    verdict = verdict_of(reports / "r", "llama-tiny/tp1-pp1")
    assert verdict["verdict"] == "error", verdict["reason"]
    assert verdict["reason"] == (
        f"harness error: the rank pool's zygote (pid {zygote}) was killed by SIGKILL, and its ranks died with it"
    )
    assert not survivors(reports / "r")
