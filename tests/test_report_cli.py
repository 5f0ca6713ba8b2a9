"""`harness report`: rebuild a run's report, merge shard runs into one, diff two runs."""

import json
import xml.etree.ElementTree as ET

import pytest

from harness.cli import main
from harness.contract.rundir import verdict_files
from tests.kit.handmade import crashed, failing, make_run, passing

UNSHARDED = [passing("s/tp1-pp1"), failing("s/tp2-pp1"), passing("s/tp1-pp2"), crashed("s/tp2-pp2")]


def verdict_rows(run_dir):
    """Every verdict, without what depends on where the run directory lives."""
    rows = {}
    for path in verdict_files(run_dir):
        v = json.loads(path.read_text())
        v.pop("logs", None)
        rows[v["scenario"]] = v
    return rows


def summary_table(run_dir):
    return [line for line in (run_dir / "summary.md").read_text().splitlines() if line.startswith("| `")]


def junit_cases(run_dir):
    root = ET.parse(run_dir / "junit.xml").getroot()
    return sorted((c.get("classname"), c.get("name"), tuple(sorted(child.tag for child in c))) for c in root.iter("testcase"))


def test_report_rebuilds_every_file_of_a_run(tmp_path, capsys):
    run = make_run(tmp_path, "r1", UNSHARDED)
    assert main(["report", str(run)]) == 1  # not as expected: exit 1, like `harness run`
    for name in ("summary.md", "junit.xml", "pr-comment.md", "report.html", "run.json"):
        assert (run / name).exists(), name
    assert "# Harness run r1" in capsys.readouterr().out
    assert (tmp_path / "history" / "runs" / "r1.parquet").exists()  # history beside the run directory by default
    assert main(["report", str(run), "--history", str(tmp_path / "elsewhere")]) == 1
    assert (tmp_path / "elsewhere" / "runs" / "r1.parquet").exists()


@pytest.mark.parametrize("order", [("shard0", "shard1"), ("shard1", "shard0")])
def test_merging_shards_gives_the_report_of_one_unsharded_run(tmp_path, order):
    whole = make_run(tmp_path / "one", "nightly", UNSHARDED, gate="nightly", started=1000)
    shards = {
        "shard0": make_run(tmp_path / "a", "shard0", [passing("s/tp1-pp1"), passing("s/tp1-pp2")], gate="nightly", started=1000),
        "shard1": make_run(tmp_path / "b", "shard1", [failing("s/tp2-pp1"), crashed("s/tp2-pp2")], gate="nightly", started=1010),
    }
    out = tmp_path / "merged" / "nightly-merged"
    assert main(["report", str(whole)]) == 1
    assert main(["report", "--merge", str(shards[order[0]]), str(shards[order[1]]), "-o", str(out)]) == 1

    assert verdict_rows(out) == verdict_rows(whole)
    merged_meta, whole_meta = (json.loads((d / "run.json").read_text()) for d in (out, whole))
    assert merged_meta["counts"] == whole_meta["counts"] == {"pass": 2, "fail": 1, "crash": 1}
    assert merged_meta["not_as_expected"] == whole_meta["not_as_expected"]
    assert merged_meta["scenarios"] == whole_meta["scenarios"]
    assert merged_meta["merged_from"] == ["shard0", "shard1"] and merged_meta["gate"] == "nightly"
    assert summary_table(out) == summary_table(whole)
    assert junit_cases(out) == junit_cases(whole)


def test_merge_refuses_overlapping_runs_and_bad_arguments(tmp_path, capsys):
    a = make_run(tmp_path, "a", [passing("s/tp1-pp1")])
    b = make_run(tmp_path, "b", [failing("s/tp1-pp1")])
    assert main(["report", "--merge", str(a), str(b), "-o", str(tmp_path / "out")]) == 2
    assert "scenario s/tp1-pp1 is in both" in capsys.readouterr().err
    assert main(["report", "--merge", str(a), str(tmp_path / "nothing"), "-o", str(tmp_path / "out")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["report", "--merge", str(a), str(b)]) == 2
    assert "--merge needs -o OUT" in capsys.readouterr().err
    nightly = make_run(tmp_path, "n", [passing("s/tp2-pp1")], gate="nightly")
    assert main(["report", "--merge", str(a), str(nightly), "-o", str(tmp_path / "out")]) == 2
    assert "different gates" in capsys.readouterr().err
    assert main(["report"]) == 2
    assert "give exactly one of" in capsys.readouterr().err


def test_diff_lists_what_changed_between_two_runs(tmp_path, capsys):
    old = make_run(tmp_path, "old", [passing("s/tp1-pp1"), passing("s/tp2-pp1"), failing("s/tp2-pp2")], started=1000)
    new = make_run(tmp_path, "new", [passing("s/tp1-pp1", 5e-5), crashed("s/tp2-pp1"), passing("s/tp2-pp2")], started=2000)
    assert main(["report", "--diff", str(old), str(new)]) == 1  # it regressed
    out = capsys.readouterr().out
    assert "# Harness diff: `old` -> `new`" in out
    assert "**New failures (regressions): 1**" in out and "`s/tp2-pp1` crash (was pass in `old`)" in out
    assert "**Fixed: 1**" in out and "`s/tp2-pp2` pass (was fail in `old`)" in out
    assert "`s/tp1-pp1` logits.max_abs_dlogprob = 5e-05 (was 1e-05" in out  # drift against OLD's value and the band floors
    assert main(["report", "--diff", str(old), str(old)]) == 0  # nothing new: a failure that was there is still there
    same = capsys.readouterr().out
    assert "New failures" not in same and "**Still failing: 1**" in same
    clean = make_run(tmp_path, "clean", [passing("s/tp1-pp1")])
    assert main(["report", "--diff", str(clean), str(clean)]) == 0
    assert "No change" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["{not json", "[]"])
def test_a_damaged_verdict_is_named_by_report_not_a_traceback(tmp_path, capsys, damage):
    run = make_run(tmp_path, "r", [passing("s/tp1-pp1"), failing("s/tp2-pp1")])
    broken = verdict_files(run)[0]
    broken.write_text(damage)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness report: {broken} ") and "Traceback" not in err
