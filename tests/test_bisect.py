"""`harness bisect`, the parts that need no engine run: what a step's verdict says, the
choice of the next step, and the inputs refused before anything runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.bisect import decide, next_probe, outcome
from harness.cli import main
from harness.verdict import Verdict


@pytest.mark.parametrize("verdict, observed, expected", [
    ("pass", None, "pass"), ("fail", None, "fail"), ("crash", None, "crash"), ("hang", None, "hang"),
    ("expected-failure", "crash", "crash"),  # an expected failure is what it observed
    ("error", None, None), ("unsupported", None, None),
])
def test_what_a_step_says_of_the_engine(verdict, observed, expected):
    assert outcome(Verdict("s/x", verdict, "r", observed=observed)) == expected


def test_unsupported_counts_as_a_verdict_when_asked():
    assert outcome(Verdict("s/x", "unsupported", "r"), count_unsupported=True) == "unsupported"
    assert outcome(Verdict("s/x", "error", "r"), count_unsupported=True) is None


def test_the_same_as_at_good_is_good_any_other_engine_verdict_is_bad():
    assert decide("pass", "pass") == "good"
    assert decide("crash", "pass") == "bad" and decide("fail", "pass") == "bad"
    assert decide(None, "pass") == "skip"
    assert decide("pass", "crash") == "bad"  # bisecting for a fix: good crashes


def test_next_probe_halves_and_walks_around_skipped_points():
    assert next_probe(0, 4, set()) == 2
    assert next_probe(0, 5, set()) == 2  # ties: the lower
    assert next_probe(2, 4, set()) == 3
    assert next_probe(0, 1, set()) is None  # adjacent: bad is the first bad
    assert next_probe(0, 4, {2}) == 1
    assert next_probe(0, 4, {1, 2, 3}) is None
    # a whole search over 9 releases, the first bad at index 6
    good, bad, skipped, probed = 0, 8, set(), []
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


@pytest.mark.parametrize("setup, good, bad, message", [
    (lambda p: p.mkdir() or p, "HEAD~1", "HEAD", "not a git repository"),
    (lambda p: p, "HEAD~1", "HEAD", "no such directory"),
    (repo_with_two_commits, "HEAD~1", "nosuch", "--bad nosuch: no such commit"),
    (repo_with_two_commits, "HEAD", "HEAD~1", "is not an ancestor of --bad"),
    (lambda p: (repo_with_two_commits(p), (p / "a.txt").write_text("dirty\n"))[0], "HEAD~1", "HEAD", "uncommitted changes"),
])
def test_bad_git_bisects_are_refused_before_anything_runs(tmp_path, capsys, setup, good, bad, message):
    repo = setup(tmp_path / "engine")
    code = main(["bisect", "llama-tiny/tp1-pp1", "--git", str(repo), "--good", good, "--bad", bad,
                 "--work-dir", str(tmp_path / "work")])
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


def search_over(verdicts: dict[str, str], count_unsupported: bool = False):
    from harness.bisect import _search

    ran = []

    def run(point):
        ran.append(point)
        verdict = verdicts[point]
        return Verdict("s/x", verdict, f"{verdict} at {point}"), None, Path("/runs") / point

    points = list(verdicts)
    return _search(points, run, lambda line: None, count_unsupported), ran


def test_a_release_search_ends_at_the_boundary_and_skips_what_says_nothing():
    result, ran = search_over({"0.27.0": "pass", "0.27.1": "pass", "0.28.0": "error", "0.29.0": "crash",
                               "0.30.0": "crash", "0.31.0": "crash", "0.32.0": "crash"})
    assert (result.first_bad, result.last_good) == ("0.29.0", "0.27.1")
    assert result.skipped_between == ["0.28.0"] and "could not judge 0.28.0" in result.text()
    assert ran[:2] == ["0.27.0", "0.32.0"] and len(ran) == len(set(ran))
    assert "first bad: 0.29.0, verdict crash" in result.text() and "the one before it, 0.27.1: pass" in result.text()


def _crash(exception: str, wrapper: str | None = None) -> Verdict:
    return Verdict("s/x", "crash", f"rank 0 crashed: {exception}",
                   crash={"rank": 0, "exception": exception, "wrapper": wrapper, "log": "rank0.log"})


def test_two_crashes_of_unrelated_causes_are_two_verdicts():
    """A CppCompileError at one end and a processor ValueError at the other used to be called
    "the same verdict: nothing to bisect"; a middle step is good only with the good end's cause."""
    from harness.bisect import _search, root_cause, signature

    inductor = _crash("torch._inductor.exc.InductorError: CppCompileError: C++ compile error",
                      wrapper="torch._inductor.exc.InductorError")
    assert root_cause(inductor) == "CppCompileError" and signature(inductor) == "crash (CppCompileError)"
    assert signature(_crash("ValueError: Found 1 <|image_pad|> tokens")) == "crash (ValueError)"
    by_point = {"1": inductor, "2": inductor, "3": _crash("ValueError: no images"), "4": _crash("ValueError: no images")}
    result = _search(list(by_point), lambda p: (by_point[p], None, Path("/runs") / p), lambda line: None)
    assert (result.first_bad, result.last_good) == ("3", "2")


def test_a_search_for_a_fix_names_the_releases_in_time_order():
    from harness.bisect import _search

    verdicts = {"0.32.0": "pass", "0.31.0": "pass", "0.30.0": "crash", "0.29.0": "crash"}  # good (newer) first
    result = _search(list(verdicts), lambda p: (Verdict("s/x", verdicts[p], p), None, Path("/runs") / p), lambda line: None)
    result.newest_first = True
    assert "last bad: 0.30.0" in result.text() and "the next one, 0.31.0: pass (the change is in 0.31.0)" in result.text()


def test_a_search_refuses_equal_ends_and_ends_that_say_nothing():
    from harness.bisect import BisectError

    with pytest.raises(BisectError, match="the same at good .* crash"):
        search_over({"1": "crash", "2": "pass", "3": "crash"})
    with pytest.raises(BisectError, match="at bad .* unsupported"):
        search_over({"1": "pass", "2": "unsupported"})
    result, _ = search_over({"1": "pass", "2": "pass", "3": "unsupported"}, count_unsupported=True)
    assert result.first_bad == "3"


def test_a_release_that_does_not_install_is_named_so_and_an_end_that_does_not_stops_at_once():
    from harness.bisect import BisectError, _search, step_line

    def run(point):
        if point.startswith("broken"):
            return Verdict("s/x", "error", f"vllm {point}: install failed: pip said no",
                           error={"install_failed": True}), None, Path("/runs")
        return Verdict("s/x", "crash" if point == "3" else "pass", point), None, Path("/runs") / point

    lines: list[str] = []
    with pytest.raises(BisectError, match=r"at good \(broken-1\) the install failed: .*nothing to bisect from"):
        _search(["broken-1", "2", "3"], run, lines.append)
    assert len(lines) == 1 and "install failed" in lines[0] and "-> stop" in lines[0]  # the bad end never ran
    lines.clear()
    result = _search(["1", "broken-2", "3"], run, lines.append)
    assert result.skipped_between == ["broken-2"]
    assert any("broken-2" in line and "install failed" in line and "-> skip" in line for line in lines), lines
    assert "install failed" in step_line("x", Verdict("s/x", "error", "r", error={"install_failed": True}), 1.0, "skip")
