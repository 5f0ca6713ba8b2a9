"""Reports from verdict files: JUnit, Markdown, and which verdicts stop a gate."""

import json
import xml.etree.ElementTree as ET

from harness.contract.verdict import Verdict
from harness.run.report import write_report
from tests.kit.present import present


def save(run_dir, v: Verdict):
    v.save(verdict_path(run_dir, v.scenario))


def test_report_files_and_expectations(tmp_path):
    check = {
        "name": "logits",
        "kind": "logprobs",
        "passed": False,
        "summary": "max|dlogprob|=1.2e-01",
        "metrics": {"max_abs_dlogprob": 0.12},
        "tolerance": "t",
        "first_divergence": {"prompt": 1, "position": 7},
        "per_position": [],
    }
    save(tmp_path, Verdict("s/tp1", "pass", "ok", duration_s=1.5))
    save(tmp_path, Verdict("s/tp2", "fail", "logits: diverged", checks=[check], reproduce="make s/tp2"))
    save(
        tmp_path,
        Verdict(
            "s/tp2-pp2",
            "crash",
            "rank 3 crashed: KeyError: 'residual'",
            crash={
                "rank": 3,
                "exception": "KeyError: 'residual'",
                "traceback": "Traceback ...\nKeyError: 'residual'",
                "log": "r3.log",
            },
        ),
    )
    save(tmp_path, Verdict("s/sp", "unsupported", "needs tp>=2"))
    save(tmp_path, Verdict("s/xf", "expected-failure", "crash as expected", expected_failure="bug 1", observed="crash"))
    save(tmp_path, Verdict("s/fixed", "pass", "ok", expected_failure="bug 2"))
    meta = write_report(tmp_path, {"run_id": "r1"})

    assert meta["counts"] == {"pass": 2, "fail": 1, "crash": 1, "unsupported": 1, "expected-failure": 1}
    assert sorted(meta["not_as_expected"]) == ["s/fixed", "s/tp2", "s/tp2-pp2"]
    assert json.loads((tmp_path / "run.json").read_text())["run_id"] == "r1"

    suite = present(ET.parse(tmp_path / "junit.xml").getroot().find("testsuite"))
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("6", "3", "2")
    crash = present(suite.find("testcase[@name='tp2-pp2']/failure"))
    assert "rank 3" in present(crash.get("message")) and "KeyError" in present(crash.text)

    md = (tmp_path / "summary.md").read_text()
    assert "**FAILED**" in md
    assert "| `s/tp2` | ❌ fail | max\\|dlogprob\\| 1.2e-01 | logits: prompt 1 position 7 |" in md
    assert "pass (unexpected)" in md
    assert "KeyError: 'residual'" in md and "Reproduce: `make s/tp2`" in md


def test_all_passing_run_is_ok(tmp_path):
    save(tmp_path, Verdict("s/tp1", "pass", "ok"))
    meta = write_report(tmp_path)
    assert meta["not_as_expected"] == [] and "**OK**" in (tmp_path / "summary.md").read_text()


# --- the PR comment and the HTML page ------------------------------------------------

from harness.contract.rundir import verdict_path  # noqa: E402
from harness.run.report.html import report_html, scenario_section  # noqa: E402
from harness.run.report.run import build_report  # noqa: E402
from tests.kit.handmade import crashed, failing, make_run, passing  # noqa: E402


def test_pr_comment_puts_regressions_first_with_how_to_reproduce(tmp_path):
    history = tmp_path / "history"
    write_report(
        make_run(tmp_path, "r1", [passing("s/tp1-pp1"), passing("s/tp2-pp1"), failing("s/tp2-pp2")], started=1000),
        history_dir=history,
    )
    run = make_run(tmp_path, "r2", [passing("s/tp1-pp1"), crashed("s/tp2-pp1"), failing("s/tp2-pp2")], started=2000)
    write_report(run, history_dir=history)
    comment = (run / "pr-comment.md").read_text().splitlines()
    assert comment[0] == "### Harness run `r2` (gate pr)"
    assert "**FAILED**: 1 crash, 1 fail, 1 pass of 3 scenarios" in comment
    new = comment.index("**New failures (regressions): 1**")
    still = comment.index("**Still failing: 1**")
    assert new < still  # regressions first
    assert "`s/tp2-pp1` crash (was pass in `r1`)" in comment[new + 2] and comment[new + 2].endswith(
        "`harness run s/tp2-pp1 --fault rank-raise@1`"
    )
    assert comment[still + 2].endswith("`make s/tp2-pp2`")
    assert len(comment) < 20


def test_pr_comment_without_history_lists_every_failing_scenario(tmp_path):
    run = make_run(tmp_path, "r1", [passing("s/tp1-pp1"), failing("s/tp2-pp2")])
    write_report(run)  # no history store: nothing to compare with, failures still listed
    comment = (run / "pr-comment.md").read_text()
    assert "**Failing: 1**" in comment and "`s/tp2-pp2` fail" in comment and "`make s/tp2-pp2`" in comment


def test_html_is_self_contained_and_drills_down(tmp_path):
    history = tmp_path / "history"
    write_report(
        make_run(tmp_path, "r1", [passing("s/tp1-pp1"), passing("s/tp2-pp1"), passing("s/tp2-pp2")], started=1000),
        history_dir=history,
    )
    accuracy = {
        "name": "eval:gsm8k",
        "kind": "accuracy",
        "passed": False,
        "summary": "2 items flipped",
        "metrics": {"score": 0.4, "golden_score": 0.6, "p_value": 0.5},
        "flipped": [{"doc_id": 3, "flipped": "to wrong"}, {"doc_id": 9, "flipped": "to wrong"}],
        "where": "eval:gsm8k: items 3, 9 flipped to wrong",
    }  # written by the eval check
    acc = failing("s/tp2-pp2")
    acc.checks.append(accuracy)
    hang = Verdict(
        "s/tp1-pp2",
        "hang",
        "no result after 30s",
        settings={"tp": 1, "pp": 2, "sp": False},
        hang={"stuck_at": {"0": "pipeline.py:88 in recv", "1": "faults.py:80 in fire"}, "stacks": {"0": "Thread 0x1 ...recv"}},
    )
    run = make_run(tmp_path, "r2", [passing("s/tp1-pp1"), crashed("s/tp2-pp1"), acc, hang], started=2000)
    write_report(run, history_dir=history)
    html = (run / "report.html").read_text()

    assert "http://" not in html and "https://" not in html and "<script" not in html  # opens from disk, nothing fetched
    top = html[: html.index("<h2>Matrix</h2>")]
    assert "Regressed since <code>r1</code>: 2 new failure(s)" in top and "s/tp2-pp1" in top and "s/tp2-pp2" in top
    assert html.count('src="data:image/png;base64,') >= 4  # heat map, divergence plots, trends
    assert "RuntimeError: injected failure on rank 1" in html  # the crashing rank's traceback
    assert "pipeline.py:88 in recv" in html and "Thread 0x1 ...recv" in html  # where the hung ranks were
    assert "eval:gsm8k: flipped (2)" in html and "<td>9</td>" in html  # accuracy items, rendered generically
    summary = (run / "summary.md").read_text()
    assert "gsm8k 0.400 (golden 0.600, p=0.5)" in summary and "eval:gsm8k: items 3, 9 flipped to wrong" in summary
    assert "harness run s/tp2-pp1 --fault rank-raise@1" in html


def test_html_shows_a_localization_when_a_verdict_has_one(tmp_path):
    run = make_run(tmp_path, "r1", [failing("s/tp2-pp2")])
    report = build_report(run, {"run_id": "r1", "started": 1.0}, None)
    report.verdicts[0].localization = {"first_diverging_layer": 3, "rank": 1, "tensor": "residual"}
    section = scenario_section(report, report.verdicts[0])
    assert "first_diverging_layer" in section["localization"] and "residual" in section["localization"]
    assert "Localization (first diverging layer)" in report_html(report)


def test_report_shows_what_was_expected_beside_what_happened(tmp_path):
    from harness.contract.expectations import apply_expectations
    from harness.inputs.scenarios.schema import ExpectedFailure

    x = ExpectedFailure(
        match={"pp": 2},
        engine_version="vllm==0.32.*",
        exception="AssertionError",
        rank="Worker_PP1",
        reason="PP buffer never allocated",
    )
    v = Verdict(
        "s/pp2",
        "crash",
        "rank Worker_PP1 crashed: AttributeError: no get",
        versions={"engine": "vllm", "vllm": "0.32.0", "torch": "2.13.0"},
        crash={
            "rank": "Worker_PP1 (vLLM worker)",
            "exception": "AttributeError: no get",
            "traceback": "tb",
            "log": "l",
            "frame": "vllm/model_executor/models/gemma4.py:812 in forward",
            "wrapper": None,
        },
    )
    save(tmp_path, apply_expectations(v, (x,)))
    write_report(tmp_path, {"run_id": "r1"})
    md = (tmp_path / "summary.md").read_text()
    assert "- expected (mismatch): crash AssertionError on /Worker_PP1/ (vllm==0.32.*): PP buffer never allocated" in md, md
    assert "- happened on vllm 0.32.0 (torch 2.13.0): crash AttributeError: no get on rank Worker_PP1 (vLLM worker)" in md
    assert "Raised at `vllm/model_executor/models/gemma4.py:812 in forward`" in md
    html = (tmp_path / "report.html").read_text()
    assert "expected (mismatch)" in html and "happened on vllm 0.32.0" in html and "gemma4.py:812 in forward" in html


def test_plots_drawn_ahead_are_not_drawn_again(tmp_path, monkeypatch):
    """A finished scenario's divergence plot is drawn in the background while the next
    one runs (the progress display calls draw_ahead); writing the report reuses it."""
    from harness.run.report import html, plots

    drawn = []
    real = plots.divergence_plot

    def drawing(c, b):
        drawn.append(c["name"])
        return real(c, b)

    monkeypatch.setattr(plots, "divergence_plot", drawing)
    check = {
        "name": "logits",
        "kind": "logprobs",
        "passed": True,
        "summary": "ok",
        "metrics": {"max_abs_dlogprob": 1e-6},
        "tolerance": "|dlogprob|<=0.0002, ",
        "per_position": [1e-6, 3e-6, 2e-6],
    }
    v = Verdict("ahead/tp2", "pass", "ok", checks=[check])
    save(tmp_path, v)
    html.draw_ahead(v)
    present(html._drawer).submit(lambda: None).result()  # the drawer has finished what was queued before
    assert drawn == ["logits"]
    write_report(tmp_path, {"run_id": "r1"})
    assert drawn == ["logits"]  # not drawn a second time
    assert "data:image/png;base64," in (tmp_path / "report.html").read_text()


# --- the heat maps ---------------------------------------------------------------------


def _png_size(uri: str) -> tuple[int, int]:
    import base64
    import struct

    png = base64.b64decode(uri.split(",", 1)[1])
    return struct.unpack(">II", png[16:24])  # the IHDR chunk: width, height


def test_a_heat_map_is_drawn_to_its_cells_not_to_a_fixed_size():
    from harness.run.report.plots import CELL_H, CELL_W, heatmap

    def size(tps, pps):
        return _png_size(present(heatmap([passing(f"s/tp{t}-pp{p}") for t in tps for p in pps], set())))

    one = size([2], [1])
    assert one[0] < 300 and one[1] < 200, one  # a one-cell suite is one cell big, not a block
    assert abs(size([1, 2], [1])[1] - one[1] - 100 * CELL_H) < 10  # a row more: one cell's height (100 dpi) more
    assert abs(size([1, 2], [1, 2, 3, 4])[0] - size([1, 2], [1, 2, 3])[0] - 100 * CELL_W) < 10  # a column: its width


def test_a_pr_gate_heat_map_leaves_out_the_rows_and_columns_in_which_nothing_ran():
    from harness.run.report.plots import heat_panels

    gate = ["tp1-pp1", "tp2-pp1", "tp1-pp2", "tp2-pp2", "tp2-pp1-sp", "tp2-pp2-sp", "tp4-pp1-sp"]
    rows, cols, panels = heat_panels([passing(f"s/{axes}") for axes in gate])
    assert (rows, cols) == ("tp", "pp")
    shown = {p.title: (p.rows, p.cols) for p in panels}
    assert shown == {"sp=off": ([1, 2], [1, 2]), "sp=on": ([2, 4], [1, 2])}  # tp=1 has no sp, tp=4 only sp
    assert sum(len(p.rows) * len(p.cols) - len(p.cells) for p in panels) == 1  # only tp4-pp2-sp not run


def test_the_heat_map_says_what_its_cell_numbers_are(tmp_path, monkeypatch):
    from harness.run.report import plots

    figures = []

    def to_data_uri(fig, tight=True):
        figures.append(fig)
        return "data:image/png;base64,"

    monkeypatch.setattr(plots, "to_data_uri", to_data_uri)
    plots.heatmap([passing("s/tp1-pp1")], set())
    assert "max |dlogprob|" in figures[0].legends[0].get_title().get_text()  # in the picture, wherever it is pasted
    run = make_run(tmp_path, "r1", [passing("s/tp1-pp1")])
    write_report(run)
    html = (run / "report.html").read_text()
    label = html[html.index('id="heatmap-label"') : html.index("verdict heat map of s")]  # and above the heat maps
    assert "<b>max |dlogprob|</b>" in label and "the rank that died" in label


def test_a_pr_gate_report_puts_the_scenario_table_before_the_heat_maps(tmp_path):
    def page(gate: str) -> str:
        run = make_run(tmp_path, gate, [passing("s/tp1-pp1"), failing("s/tp2-pp1")], gate=gate)
        write_report(run)
        return (run / "report.html").read_text()

    pr, nightly = page("pr"), page("nightly")
    assert pr.index("<h2>Scenarios</h2>") < pr.index("<h2>Matrix</h2>") < pr.index('alt="verdict heat map of s"')
    assert nightly.index("<h2>Matrix</h2>") < nightly.index("<h2>Scenarios</h2>")  # the whole matrix is the news there


def test_suites_in_which_nothing_was_tested_are_folded_into_one_line(tmp_path):
    unsupported = [Verdict(f"vl/tp{t}-pp1", "unsupported", "no images", settings={"tp": t, "pp": 1}) for t in (1, 2)]
    run = make_run(tmp_path, "r1", [passing("s/tp1-pp1"), *unsupported])
    write_report(run)
    html = (run / "report.html").read_text()
    folded = html[html.index('<details id="untested-suites">') :]
    folded = folded[: folded.index("</details>")]
    assert "Nothing tested in 1 suite(s), every scenario unsupported: <b>vl</b></summary>" in " ".join(folded.split())
    assert 'alt="verdict heat map of vl"' in folded and 'alt="verdict heat map of s"' not in folded
    assert html.index('alt="verdict heat map of s"') < html.index('id="untested-suites"') and 'id="nothing-tested"' not in html

    run = make_run(tmp_path, "r2", unsupported)
    write_report(run)  # every scenario unsupported: said at the top, as summary.md does
    html = (run / "report.html").read_text()
    assert html.index('id="nothing-tested"') < html.index('id="untested-suites"') and "No scenario finished" not in html


def test_every_table_of_the_page_scrolls_inside_its_own_box(tmp_path):
    """A check with many metrics makes a table wider than the page: it scrolls in a box
    (overflow-x: auto) instead of the page; headless Chromium measures it in test_report_e2e."""
    import re

    wide = failing("s/tp2-pp1")
    wide.checks[0]["metrics"].update({f"a_metric_with_a_long_name_{i}": i / 7 for i in range(30)})
    hang = Verdict("s/tp1-pp2", "hang", "stuck", settings={"tp": 1, "pp": 2, "sp": False}, hang={"stuck_at": {"0": "recv"}})
    run = make_run(tmp_path, "r1", [passing("s/tp1-pp1"), wide, hang])
    write_report(run)
    html = (run / "report.html").read_text()
    assert re.search(r"\.scroll \{ overflow-x: auto;", html)
    tables = [m.start() for m in re.finditer("<table", html)]
    assert len(tables) >= 5 and all(html[:at].rstrip().endswith('<div class="scroll">') for at in tables)
    assert "a_metric_with_a_long_name_29" in html
