"""The Markdown a CI system renders (summary.md, pr-comment.md, `harness report --diff`)
shows text from scenario files, engines and tracebacks as text: never as HTML, never
closing its code span or block, never splitting a table cell: what a report quotes must
not change the report's shape."""

import html
import re

import pytest
from markdown_it import MarkdownIt

from harness.contract.rundir import verdict_path
from harness.contract.verdict import Verdict
from harness.run.report import write_report
from harness.run.report.axes import explaining_settings
from harness.run.report.markdown import diff_markdown, pr_comment_markdown, summary_markdown
from harness.run.report.regressions import Band, Change, Comparison, Drift
from harness.run.report.run import RunReport

IMG = "<img src=x onerror=alert(1)>"
PAYLOADS = [IMG, f"a ``` b ` c {IMG}", f"x | y {IMG} |", f"`{IMG} ``", f"{IMG}\n```\n{IMG}"]
MD = MarkdownIt("commonmark").enable("table")  # the commonmark preset renders raw HTML, as GitHub would without its sanitizer


def render(report) -> tuple[str, str]:
    """summary.md and pr-comment.md of a report."""
    return summary_markdown(report), pr_comment_markdown(report)


def shown(s: str) -> str:
    """How a one-line rendering of s reads in the HTML (escaped once, lines joined)."""
    return html.escape(" ".join(s.splitlines()), quote=False)


def assert_no_html(md: str) -> str:
    out = MD.render(md)
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out, md
    return out


def assert_cells_kept(md: str) -> None:
    """Every row of every table has its header's number of cells (a `|` that a renderer
    takes for a cell border is one not preceded by a backslash, as markdown-it splits)."""
    width = None
    for line in md.splitlines() + [""]:
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        width = width or cells
        assert cells == width, line


def hostile_verdicts(p: str, tb: str) -> list[Verdict]:
    checks = [
        {
            "name": p,
            "kind": "logprobs",
            "passed": False,
            "summary": p,
            "metrics": {"max_abs_dlogprob": 0.1},
            "first_divergence": {"prompt": 1, "position": 2},
        },
        {
            "name": f"eval:{p}",
            "kind": "accuracy",
            "passed": False,
            "summary": p,
            "where": p,
            "metrics": {"score": 0.4, "golden_score": 0.6, "p_value": 0.5},
        },
    ]
    timed = {"phases": {"start": 1.0, "compare": 0.1}, "engine_s": 1.0, "harness_s": 0.2, "wait_s": 0.0}
    expectation = {"status": p, "expected": p, "reason": p, "why": p, "happened": p, "ran_on": p}
    bad = {"opt": p}
    return [
        Verdict(
            f"s/fail {p}@{p}",
            "fail",
            p,
            settings=bad,
            tolerance=p,
            checks=checks,
            reproduce=p,
            expectation=expectation,
            versions={p: p},
            timings=timed,
            duration_s=1.0,
        ),
        Verdict(
            f"s/crash {p}@{p}",
            "crash",
            p,
            settings=bad,
            reproduce=p,
            duration_s=2.0,
            crash={"rank": p, "exception": p, "traceback": tb, "log": p, "frame": p, "wrapper": p},
        ),
        Verdict(f"s/hang {p}@{p}", "hang", p, settings=bad, hang={"stuck_at": {p: p}}, reproduce=p),
        Verdict(f"s/error {p}@{p}", "error", p, error={"exception": p, "traceback": tb}, reproduce=p),
        Verdict(f"s/xfail {p}@{p}", "expected-failure", p, settings=bad, expected_failure=p, observed=p, expectation=expectation),
        Verdict(f"s/unsupported {p}@{p}", "unsupported", p),
        Verdict(f"s/pass {p}@{p}", "pass", p, timings=timed),
    ]


def hostile_comparison(p: str, verdicts: list[Verdict]) -> Comparison:
    def change(v: Verdict) -> Change:
        return Change(v.scenario, p, p, before=p, before_run=p)

    return Comparison(
        previous_run=p,
        new_failures=[change(verdicts[0])],
        still_failing=[change(verdicts[1])],
        first_seen=[change(verdicts[2])],
        fixed=[change(verdicts[6])],
        coverage_lost=[change(verdicts[6])],
        drifted=[Drift(p, p, 1.0, Band(1.0, 0.1, 5), 0.9)],
    )


@pytest.mark.parametrize("p", PAYLOADS)
def test_text_from_scenario_files_engines_and_tracebacks_never_renders_as_html(tmp_path, p):
    tb = f"Traceback (most recent call last):\n```\n  {p}\n````\nKeyError: {p} | `x`"
    verdicts = hostile_verdicts(p, tb)
    meta = {"run_id": p, "gate": p, "versions": {p: p}, "counts": {p: 1}, "scenarios": [v.scenario for v in verdicts] + [p]}
    comparison = hostile_comparison(p, verdicts)
    report = RunReport(tmp_path, meta, verdicts, comparison=comparison, history_error=p)
    summary, comment = render(report)
    diff = diff_markdown({"run_id": p}, {"run_id": p}, comparison, verdicts)
    report.comparison = None  # the PR comment then lists every failing scenario itself
    _, listing = render(report)

    for md in (summary, comment, listing, diff):
        out = assert_no_html(md)
        assert f"<code>{shown(p)}</code>" in out  # a code span shows its text as is
        assert_cells_kept(md)
    out = MD.render(summary)
    assert f"<pre><code>{html.escape(tb, quote=False)}\n</code></pre>" in out  # no ``` inside ends the block early
    assert out.count(f"<pre><code>{html.escape(tb, quote=False)}") == 2  # the crash's and the error's
    assert f"<p>{shown(p)}</p>" in out  # prose: the reason, escaped once, reads as written
    assert f"- expected ({p.splitlines()[0]}" not in summary  # the expectation's fields went through the escaping
    assert f"<li>expected ({shown(p)}): {shown(p)}: {shown(p)}</li>" in out
    assert f"<th><code>{shown(p)}</code></th>" in out  # an engine version's column head, cell intact
    assert f"<td><code>s/fail {shown(p)}@{shown(p)}</code></td>" in out  # the scenario's cell holds all of its id
    assert re.search(r"<td>1\.0s</td>\s*</tr>", out)  # and the row its last cell
    assert f"<code>opt={shown(p)}</code>" in out  # the setting that explains the failures
    assert f"<code>harness run {shown(p)}</code>" in out  # the command that runs what never ran


@pytest.mark.parametrize("p", PAYLOADS)
def test_the_closest_setting_and_the_passes_that_share_it_are_escaped(p):
    verdicts = [
        Verdict(f"s/f1 {p}", "fail", "x", settings={"opt": p, "a": 1}),
        Verdict(f"s/f2 {p}", "fail", "x", settings={"opt": p, "a": 2}),
        Verdict(f"s/p1 {p}", "pass", "x", settings={"opt": p, "a": 3}),
    ]
    sentence = explaining_settings(verdicts)
    assert sentence and sentence.startswith("No single setting")
    out = assert_no_html(sentence)
    assert f"<code>opt={shown(p)}</code>" in out and f"s/p1 {shown(p)}" in out


def test_an_expected_failure_reason_from_a_scenario_file_is_escaped_in_the_files_written(tmp_path):
    """The case first seen, through write_report: a scenario file's expected-failure reason."""
    from harness.contract.expectations import apply_expectations
    from harness.inputs.scenarios.schema import ExpectedFailure

    x = ExpectedFailure(match={"pp": 2}, exception="AssertionError", reason=IMG)
    v = Verdict(
        "s/pp2",
        "crash",
        f"rank 1 crashed: AttributeError: {IMG}",
        reproduce="make s/pp2",
        crash={"rank": 1, "exception": f"AttributeError: {IMG}", "traceback": f"tb\n```\n{IMG}", "log": "l", "frame": IMG},
    )
    judged = apply_expectations(v, (x,))
    judged.save(verdict_path(tmp_path, judged.scenario))
    write_report(tmp_path, {"run_id": "r1"})
    for name in ("summary.md", "pr-comment.md"):
        assert_no_html((tmp_path / name).read_text())
    assert f": {html.escape(IMG, quote=False)}</li>" in MD.render(
        (tmp_path / "summary.md").read_text()
    )  # the reason, shown as written


def test_prose_and_code_spans_mixed_on_one_line_keep_to_their_own_text():
    """Any mix of the pieces that break Markdown (tags, backtick runs, backslashes, pipes,
    newlines) in prose and code spans side by side, in a paragraph and in a table row."""
    import random

    from harness.run.report.escape import code, text

    pieces = [IMG, "`", "``", "```", "\\", "|", "\n", " ", "a", "&lt;", "*", "[x](y)"]
    rng = random.Random(25)
    for _ in range(300):
        a, b, c, d = ("".join(rng.choices(pieces, k=rng.randint(1, 6))) for _ in range(4))
        line = f"- {text(a)} {code(b)} {text(c)}: {code(d)}"
        row = f"| {code(b, cell=True)} | {text(a)} | {code(d, cell=True)} | {text(c)} |"
        out = MD.render(f"{line}\n\n| 1 | 2 | 3 | 4 |\n|---|---|---|---|\n{row}\n")
        assert "<img" not in out, (a, b, c, d)
        for s in (b, d):
            assert f"<code>{shown(s) or ' '}</code>" in out, (s, out)  # an empty one shows a space
        assert_cells_kept(row)
