"""Report outputs of other packages (harness/run/report/writers.py): a writer registered under the
`harness.reports` entry-point group writes its file beside the built-in ones; one that fails
or claims a built-in name costs only its own file and is named in run.json. The example
writer (examples/report-csv) is found as an installed package would be: a dist-info with its
entry point on sys.path."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from harness.contract import plugins
from harness.contract.rundir import verdict_path
from harness.contract.verdict import Verdict
from harness.run.report import write_report

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "report-csv"


def install(site: Path, name: str, entry_points: dict[str, str]) -> None:
    """What pip leaves of a package: its metadata and entry points (the code is on sys.path)."""
    info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[harness.reports]\n{lines}")


@pytest.fixture
def site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    plugins.clear_cache()
    yield site
    plugins.clear_cache()


def a_run(run_dir: Path) -> Path:
    for v in (
        Verdict("s/tp1", "pass", "ok", duration_s=1.5, versions={"engine": "reference", "reference": "0.1"}),
        Verdict("s/tp2", "crash", "rank 1 crashed: KeyError: 'x'"),
    ):
        v.save(verdict_path(run_dir, v.scenario))
    return run_dir


def test_an_installed_writer_adds_its_file_to_every_report(tmp_path, site):
    install(site, "harness-report-csv", {"verdicts.csv": "harness_report_csv:verdicts_csv"})
    run = a_run(tmp_path / "run")
    meta = write_report(run, {"run_id": "r1"})
    rows = list(csv.DictReader(io.StringIO((run / "verdicts.csv").read_text())))
    assert [(r["scenario"], r["verdict"]) for r in rows] == [("s/tp1", "pass"), ("s/tp2", "crash")]
    assert rows[0]["engine_version"] == "0.1" and rows[1]["reason"] == "rank 1 crashed: KeyError: 'x'"
    assert (run / "summary.md").exists() and (run / "junit.xml").exists() and "report_writer_errors" not in meta


def test_a_failing_or_clashing_writer_costs_only_its_own_file(tmp_path, site, capsys):
    (site / "bad_writers.py").write_text(
        "def boom(report):\n    raise RuntimeError('no disk quota')\ndef not_text(report):\n    return 3\n"
    )
    install(
        site,
        "bad-writers",
        {
            "boom.txt": "bad_writers:boom",
            "three.txt": "bad_writers:not_text",
            "summary.md": "bad_writers:boom",
            "missing.txt": "bad_writers:nope",
            "../escape.txt": "bad_writers:boom",
        },
    )
    run = a_run(tmp_path / "run")
    meta = write_report(run, {"run_id": "r1"})
    errors = meta["report_writer_errors"]
    assert errors["boom.txt"] == "RuntimeError: no disk quota"
    assert errors["three.txt"].startswith("returned int")
    assert errors["summary.md"].startswith("built in")
    assert "missing.txt" in errors and "not a plain file name" in errors["../escape.txt"]
    assert "s/tp2" in (run / "summary.md").read_text()  # the harness's own summary, untouched by the clash
    assert not (run / "boom.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert "report writer 'boom.txt' wrote nothing (RuntimeError: no disk quota)" in capsys.readouterr().err
    # a rebuild without the bad writers clears the record
    plugins.clear_cache()
    for d in site.glob("bad_writers*.dist-info"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    assert "report_writer_errors" not in write_report(run)
