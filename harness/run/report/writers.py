"""Report outputs: each one file of reports/<run-id>/, written from the run's report.

Every writer has one signature, `writer(report: RunReport) -> str`: the text of the file its
name names (`junit.xml`, `summary.md`). The built-in writers make junit.xml, summary.md,
pr-comment.md and report.html; an installed package adds another through the
`harness.reports` entry-point group, the way it adds an engine (`name = "module:function"`,
the name being the file's; examples/report-csv). A built-in name wins over a package's, two
packages claiming one name write neither, and a writer that fails costs only its own file:
the others are written and run.json says what went wrong (`report_writer_errors`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from harness.contract import plugins
from harness.run.report.junit import junit_xml
from harness.run.report.markdown import pr_comment_markdown, summary_markdown
from harness.run.report.run import RunReport

ReportWriter = Callable[[RunReport], str]
REPORTS_GROUP = "harness.reports"
# a file in the run directory, nothing above it
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _html(report: RunReport) -> str:
    from harness.run.report.html import report_html  # matplotlib: only once a report is drawn

    return report_html(report)


BUILTIN: dict[str, ReportWriter] = {
    "junit.xml": lambda report: junit_xml(report.verdicts, report.meta),
    "summary.md": summary_markdown,
    "pr-comment.md": pr_comment_markdown,
    "report.html": _html,
}


def writers() -> tuple[dict[str, ReportWriter], dict[str, str]]:
    """The writers of a report (the built-in ones, then the installed packages'), and for
    each package writer that cannot be used, why."""
    chosen: dict[str, ReportWriter] = dict(BUILTIN)
    problems: dict[str, str] = {}
    for name, found in sorted(plugins.discover(REPORTS_GROUP).items()):
        if name in BUILTIN:
            problems[name] = f"built in; the writer of {found[0].origin()} is ignored"
        elif not FILE_NAME.match(name):
            problems[name] = f"'{name}' ({found[0].origin()}) is not a plain file name"
        elif len(found) > 1:
            problems[name] = plugins.ambiguity(name, found)
        else:
            try:
                writer = found[0].load()
            except plugins.PluginError as exc:
                problems[name] = str(exc)
                continue
            if callable(writer):
                chosen[name] = writer
            else:
                problems[name] = f"{found[0].origin()}: {writer!r} is not a function of the run's report"
    return chosen, problems


def render(report: RunReport) -> tuple[dict[str, str], dict[str, str]]:
    """Each writer's file text by file name, and the writers that failed (name -> why)."""
    chosen, problems = writers()
    texts: dict[str, str] = {}
    for name, writer in chosen.items():
        # the harness's own: a failure there is a harness bug, raised
        if name in BUILTIN:
            texts[name] = writer(report)
            continue
        try:
            text = writer(report)
        except Exception as exc:  # noqa: BLE001 - another package's writer may raise anything
            problems[name] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(text, str):
            texts[name] = text
        else:
            problems[name] = f"returned {type(text).__name__}, not the file's text (str)"
    return texts, problems
