"""`harness bisect`, the parts that need no engine run: what a step's verdict says, the
choice of the next step, and the inputs refused before anything runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.verdict import Verdict
from harness.run.bisect import decide, next_probe, outcome
from harness.run.bisect import repro_hook as REPRO_HOOK
from tests.kit.present import present


@pytest.mark.parametrize(
    "verdict, observed, expected",
    [
        ("pass", None, "pass"),
        ("fail", None, "fail"),
        ("crash", None, "crash"),
        ("hang", None, "hang"),
        ("expected-failure", "crash", "crash"),  # an expected failure is what it observed
        ("error", None, None),
        ("unsupported", None, None),
    ],
)
def test_what_a_step_says_of_the_engine(verdict, observed, expected):
    assert outcome(Verdict("s/x", verdict, "r", observed=observed)) == expected


def test_unsupported_counts_as_a_verdict_when_asked():
    assert outcome(Verdict("s/x", "unsupported", "r"), count_unsupported=True) == "unsupported"
    assert outcome(Verdict("s/x", "error", "r"), count_unsupported=True) is None


def test_a_step_is_good_as_the_good_end_bad_as_the_bad_end_else_odd():
    assert decide("pass", "pass", "fail") == "good" and decide("fail", "pass", "fail") == "bad"
    assert decide("crash (ValueError)", "pass", "fail") == "odd"  # a third behaviour: neither
    assert decide("crash (CppCompileError)", "pass", "crash (ValueError)") == "odd"  # another root cause
    assert decide(None, "pass", "fail") == "skip"


def test_next_probe_halves_and_walks_around_skipped_points():
    assert next_probe(0, 4, set()) == 2
    assert next_probe(0, 5, set()) == 2  # ties: the lower
    assert next_probe(2, 4, set()) == 3
    assert next_probe(0, 1, set()) is None  # adjacent: bad is the first bad
    assert next_probe(0, 4, {2}) == 1
    assert next_probe(0, 4, {1, 2, 3}) is None
    # a whole search over 9 releases, the first bad at index 6
    good, bad, probed = 0, 8, []
    skipped: set[int] = set()
    while (i := next_probe(good, bad, skipped)) is not None:
        probed.append(i)
        good, bad = (i, bad) if i < 6 else (good, i)
    assert bad == 6 and good == 5 and len(probed) == 3


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def repo_with_two_commits(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for n in (1, 2):
        (path / "a.txt").write_text(f"{n}\n")
        git(path, "add", "a.txt")
        git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", str(n))
    return path


@pytest.mark.parametrize(
    "setup, good, bad, extra, message",
    [
        (lambda p: p.mkdir() or p, "HEAD~1", "HEAD", [], "not a git repository"),
        (lambda p: p, "HEAD~1", "HEAD", [], "no such directory"),
        (repo_with_two_commits, "HEAD~1", "nosuch", [], "--bad nosuch: no such commit"),
        (
            repo_with_two_commits,
            "HEAD",
            "HEAD~1",
            [],
            "--good HEAD is newer than --bad HEAD~1: a bisect looks for the change that brought a bug",
        ),  # most likely swapped; --fixed says it is meant
        (repo_with_two_commits, "HEAD~1", "HEAD", ["--fixed"], "but --good HEAD~1 is older than --bad HEAD; swap them"),
        (
            lambda p: (repo_with_two_commits(p), (p / "a.txt").write_text("dirty\n"))[0],
            "HEAD~1",
            "HEAD",
            [],
            "uncommitted changes",
        ),
    ],
)
def test_bad_git_bisects_are_refused_before_anything_runs(tmp_path, capsys, setup, good, bad, extra, message):
    repo = setup(tmp_path / "engine")
    code = main(
        [
            "bisect",
            "llama-tiny/tp1-pp1",
            "--git",
            str(repo),
            "--good",
            good,
            "--bad",
            bad,
            *extra,
            "--work-dir",
            str(tmp_path / "work"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "work").exists()


def test_an_unknown_scenario_and_a_stray_install_are_refused(tmp_path, capsys):
    assert main(["bisect", "llama-tiny/tp9", "--good", "1", "--bad", "2"]) == 2
    assert "no scenario 'llama-tiny/tp9'" in capsys.readouterr().err
    assert main(["bisect", "llama-tiny/tp1-pp1", "--good", "1", "--bad", "2", "--install", "make"]) == 2
    assert "--install goes with --git" in capsys.readouterr().err


def test_releases_of_an_engine_that_cannot_install_them_are_refused(capsys):
    assert main(["bisect", "llama-tiny/tp1-pp1", "--good", "1.0", "--bad", "2.0"]) == 2
    assert "engine 'reference' cannot install releases" in capsys.readouterr().err


def test_releases_not_on_the_index_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert main(["bisect", "vllm-llama/tp1-pp2", "--good", "0.0.998", "--bad", "0.0.999", "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "0.0.998, 0.0.999: not on the package index" in err, err
    assert not (tmp_path / "cache" / "envs").exists()


def search_over(verdicts: dict[str, str | Verdict], count_unsupported: bool = False, good_verdict: str = "pass"):
    from harness.run.bisect import _search

    ran = []

    def run(point):
        ran.append(point)
        verdict = verdicts[point]
        v = verdict if isinstance(verdict, Verdict) else Verdict("s/x", verdict, f"{verdict} at {point}")
        return v, None, Path("/runs") / point

    points = list(verdicts)
    return _search(points, run, lambda line: None, count_unsupported, good_verdict), ran


def test_a_release_search_ends_at_the_boundary_and_skips_what_says_nothing():
    result, ran = search_over(
        {
            "0.27.0": "pass",
            "0.27.1": "pass",
            "0.28.0": "error",
            "0.29.0": "crash",
            "0.30.0": "crash",
            "0.31.0": "crash",
            "0.32.0": "crash",
        }
    )
    assert (result.first_bad, result.last_good) == ("0.29.0", "0.27.1")
    assert result.skipped_between == ["0.28.0"] and "could not judge 0.28.0" in result.text()
    assert ran[:2] == ["0.27.0", "0.32.0"] and len(ran) == len(set(ran))
    assert "first bad: 0.29.0, verdict crash" in result.text() and "the one before it, 0.27.1: pass" in result.text()


def _crash(exception: str, wrapper: str | None = None, frame: str | None = None) -> Verdict:
    return Verdict(
        "s/x",
        "crash",
        f"rank 0 crashed: {exception}",
        crash={"rank": 0, "exception": exception, "wrapper": wrapper, "frame": frame, "log": "rank0.log"},
    )


def test_two_crashes_of_unrelated_causes_are_two_verdicts():
    """A CppCompileError at one end and a processor ValueError at the other used to be called
    "the same verdict: nothing to bisect"; a middle step is good only with the good end's cause."""
    from harness.run.bisect import root_cause, signature

    inductor = _crash(
        "torch._inductor.exc.InductorError: CppCompileError: C++ compile error", wrapper="torch._inductor.exc.InductorError"
    )
    assert root_cause(inductor) == "CppCompileError" and signature(inductor) == "crash (CppCompileError)"
    assert signature(_crash("ValueError: Found 1 <|image_pad|> tokens")) == "crash (ValueError)"
    no_images = _crash("ValueError: no images")
    result, _ = search_over({"1": inductor, "2": inductor, "3": no_images, "4": no_images}, good_verdict="crash")
    assert (result.first_bad, result.last_good) == ("3", "2")


def test_a_search_for_a_fix_names_the_releases_in_time_order():
    result, _ = search_over({"0.32.0": "pass", "0.31.0": "pass", "0.30.0": "crash", "0.29.0": "crash"})  # good (newer) first
    result.newest_first = True
    assert "last bad: 0.30.0" in result.text() and "the next one, 0.31.0: pass (the change is in 0.31.0)" in result.text()


def test_a_good_end_that_does_not_pass_stops_at_once_the_bad_end_unrun():
    """The bisect of the issue: 0.19.1 crashed (CppCompileError) and was labelled good."""
    from harness.run.bisect import BisectError

    inductor = _crash(
        "torch._inductor.exc.InductorError: CppCompileError: C++ compile error", wrapper="torch._inductor.exc.InductorError"
    )
    with pytest.raises(BisectError) as refused:
        search_over({"0.19.1": inductor, "0.20.2": "pass", "0.32.0": "fail"})
    message = str(refused.value)
    assert "the good end (0.19.1) must end pass, and it ended crash (CppCompileError), not pass" in message
    assert "good 0.19.1: crash (CppCompileError): rank 0 crashed: torch._inductor" in message
    assert "bad 0.32.0: not run" in message and "--good-verdict crash" in message
    ran: list[str] = []
    with pytest.raises(BisectError, match=r"good end \(1\) must end pass, and it ended fail, not pass"):
        _search_recording(ran, {"1": "fail", "2": "pass", "3": "crash"})
    assert ran == ["1"]  # neither the bad end nor a middle one ran


def _search_recording(ran: list[str], verdicts: dict):
    from harness.run.bisect import _search

    def run(point):
        ran.append(point)
        return Verdict("s/x", verdicts[point], f"{verdicts[point]} at {point}"), None, Path("/runs") / point

    return _search(list(verdicts), run, lambda line: None)


def test_a_bad_end_that_passes_or_says_nothing_stops_with_both_verdicts():
    from harness.run.bisect import BisectError

    ran: list[str] = []
    with pytest.raises(BisectError) as refused:
        _search_recording(ran, {"1": "pass", "2": "crash", "3": "pass"})
    message = str(refused.value)
    assert "the bad end (3) must end other than the good end (pass), and it ended pass too" in message
    assert "good 1: pass: pass at 1" in message and "bad 3: pass: pass at 3" in message
    assert ran == ["1", "3"]  # the middle never ran
    with pytest.raises(BisectError, match=r"bad end \(2\) .* it ended unsupported, which says nothing of the engine"):
        search_over({"1": "pass", "2": "unsupported"})
    result, _ = search_over({"1": "pass", "2": "pass", "3": "unsupported"}, count_unsupported=True)
    assert result.first_bad == "3"


def test_a_good_verdict_other_than_pass_is_asked_for():
    result, _ = search_over({"1": "crash", "2": "crash", "3": "fail", "4": "fail"}, good_verdict="crash")
    assert (result.first_bad, result.last_good) == ("3", "2")
    result, _ = search_over({"1": "unsupported", "2": "pass", "3": "pass"}, good_verdict="unsupported")
    assert (result.first_bad, result.last_good) == ("2", "1")  # when did the engine start supporting it


def test_a_middle_step_neither_good_nor_bad_is_reported_with_its_root_cause_and_stepped_over():
    other = _crash(
        "ValueError: Found 1 <|image_pad|> tokens in the text but no images were passed",
        frame="/venv/transformers/processing_utils.py:805 in _check_special_mm_tokens",
    )
    lines: list[str] = []
    from harness.run.bisect import _search

    verdicts: dict[str, str | Verdict] = {"1": "pass", "2": "pass", "3": other, "4": "fail", "5": "fail"}

    def verdict(point: str) -> Verdict:
        v = verdicts[point]
        return v if isinstance(v, Verdict) else Verdict("s/x", v, point)

    result = _search(list(verdicts), lambda p: (verdict(p), None, Path("/runs") / p), lines.append)
    assert (result.first_bad, result.last_good) == ("4", "2") and result.skipped_between == ["3"]
    assert [s.point for s in result.odd] == ["3"]
    assert any(line.split()[1] == "3" and "-> odd" in line for line in lines), lines
    text = result.text()
    assert (
        "neither good nor bad: 3 ended crash (ValueError) at /venv/transformers/processing_utils.py:805 "
        "in _check_special_mm_tokens"
    ) in text, text
    assert "could not judge 3: the first bad is one of them or 4" in text


def test_a_release_that_does_not_install_is_named_so_and_an_end_that_does_not_stops_at_once():
    from harness.run.bisect import BisectError, _search, step_line

    def run(point):
        if point.startswith("broken"):
            return (
                Verdict("s/x", "error", f"vllm {point}: install failed: pip said no", error={"install_failed": True}),
                None,
                Path("/runs"),
            )
        return Verdict("s/x", "crash" if point == "3" else "pass", point), None, Path("/runs") / point

    lines: list[str] = []
    with pytest.raises(BisectError, match=r"the good end \(broken-1\) must end pass, and its release did not install"):
        _search(["broken-1", "2", "3"], run, lines.append)
    assert len(lines) == 1 and "install failed" in lines[0] and "-> stop" in lines[0]  # the bad end never ran
    lines.clear()
    result = _search(["1", "broken-2", "3"], run, lines.append)
    assert result.skipped_between == ["broken-2"]
    assert any("broken-2" in line and "install failed" in line and "-> skip" in line for line in lines), lines
    assert "install failed" in step_line("x", Verdict("s/x", "error", "r", error={"install_failed": True}), 1.0, "skip")


def fake_releases(monkeypatch, verdicts: dict[str, str | Verdict]) -> list[str]:
    """`harness bisect` over releases without installing any: the index lists `verdicts`'
    releases, an install only records the release, a run ends as `verdicts` says. The
    list returned fills with the releases installed, in order."""
    from harness.inputs import engine_envs
    from harness.run import bisect

    installed: list[str] = []

    def resolve(choice, engine_name, say=print):
        installed.append(choice.version)
        return engine_envs.EngineEnv(choice.text, engine_name, Path("/fake/bin/python"), {}, f"{engine_name}-{choice.version}")

    def run_scenario(scenario, run_dir, opts):
        verdict = verdicts[installed[-1]]
        return verdict if isinstance(verdict, Verdict) else Verdict(scenario.id, verdict, f"{verdict} at {installed[-1]}")

    monkeypatch.setattr(engine_envs, "available_releases", lambda distribution: list(verdicts))
    monkeypatch.setattr(engine_envs, "resolve", resolve)
    monkeypatch.setattr(engine_envs, "versioned", lambda scenario, env: scenario)
    monkeypatch.setattr(bisect, "run_scenario", run_scenario)
    monkeypatch.setattr(bisect, "repro_hook", lambda *a, **k: None)
    return installed


def test_harness_bisect_whose_good_end_crashes_stops_before_any_other_release_installs(tmp_path, capsys, monkeypatch):
    crash = _crash(
        "torch._inductor.exc.InductorError: CppCompileError: C++ compile error", wrapper="torch._inductor.exc.InductorError"
    )
    installed = fake_releases(monkeypatch, {"0.19.1": crash, "0.20.2": "pass", "0.22.1": "pass", "0.32.0": "fail"})
    code = main(["bisect", "vllm-llama/tp1-pp1", "--good", "0.19.1", "--bad", "0.32.0", "--work-dir", str(tmp_path / "w")])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert installed == ["0.19.1"]  # neither the bad end nor a middle release was installed
    assert "bisect: 0.19.1" in out and "-> stop" in out and "-> good" not in out
    assert "the good end (0.19.1) must end pass, and it ended crash (CppCompileError)" in err and "bad 0.32.0: not run" in err


def test_harness_bisect_fixed_finds_the_release_that_fixed_a_bug(tmp_path, capsys, monkeypatch):
    installed = fake_releases(
        monkeypatch,
        {"0.27.0": "crash", "0.28.0": "crash", "0.29.0": "crash", "0.30.0": "pass", "0.31.0": "pass", "0.32.0": "pass"},
    )
    code = main(
        ["bisect", "vllm-llama/tp1-pp1", "--fixed", "--bad", "0.27.0", "--good", "0.32.0", "--work-dir", str(tmp_path / "w")]
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert installed[:2] == ["0.32.0", "0.27.0"]  # the good end first, then the bad one
    assert "last bad: 0.29.0, verdict crash" in out and "the next one, 0.30.0: pass (the change is in 0.30.0)" in out, out
    installed.clear()
    assert main(["bisect", "vllm-llama/tp1-pp1", "--good", "0.32.0", "--bad", "0.27.0", "--work-dir", str(tmp_path / "w")]) == 2
    assert "--good 0.32.0 is newer than --bad 0.27.0" in capsys.readouterr().err and installed == []


def test_a_git_step_exits_with_git_bisects_terms():
    from harness.run.bisect import BAD, GOOD, SKIP, git_exit_code

    assert (git_exit_code("good"), git_exit_code("bad"), git_exit_code("odd"), git_exit_code("skip")) == (GOOD, BAD, SKIP, SKIP)
    # --fixed: git bisect's old term is `broken` (our bad end, older), its new term `fixed` (our good end)
    assert (git_exit_code("bad", fixed=True), git_exit_code("good", fixed=True)) == (GOOD, BAD)


def test_harness_bisect_writes_its_reproduction_under_its_report_dir(tmp_path, capsys, monkeypatch):
    """`--report-dir D`: the first bad step's reproduction goes to D/repro/<id>, with the rest
    of what the bisect wrote, not into the checkout's reports/repro/."""
    from harness.run import bisect, repro

    fake_releases(monkeypatch, {"0.30.0": "pass", "0.31.0": "fail", "0.32.0": "fail"})
    monkeypatch.setattr(bisect, "repro_hook", REPRO_HOOK)  # the real one, which fake_releases replaces
    written: list[Path] = []

    def write_repro(scenario, out_dir=None, *, run_dir=None, report_dir=None, scenarios=None):
        out = repro.default_out_dir(scenario.id, report_dir)  # where the real one writes without out_dir
        written.append(out)
        return repro.Repro(out, out / repro.SCRIPT, out / repro.REPORT, None, False)

    monkeypatch.setattr(repro, "write_repro", write_repro)
    reports = tmp_path / "D"
    code = main(["bisect", "vllm-llama/tp1-pp1", "--good", "0.30.0", "--bad", "0.32.0", "--report-dir", str(reports)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert written == [reports / "repro" / "vllm-llama__tp1-pp1"], written
    assert f"reproduction: {reports / 'repro' / 'vllm-llama__tp1-pp1'}" in out


def test_a_stepped_over_crash_names_the_raise_site_and_the_models_line():
    from harness.run.bisect import odd_text

    v = _crash("KeyError: 'residual'", frame="/venv/vllm/sequence.py:43 in __getitem__")
    present(v.crash)["model_frame"] = "/venv/vllm/model_executor/models/step3_text.py:370 in forward"
    step = bisect_step("0.11.0", v)
    assert (
        "at /venv/vllm/sequence.py:43 in __getitem__ (raised) from /venv/vllm/model_executor/models/step3_text.py:370 "
        "in forward (model)"
    ) in odd_text(step)


def bisect_step(point: str, v: Verdict):
    from harness.run.bisect import Step

    return Step(point, v, 1.0, "odd")
