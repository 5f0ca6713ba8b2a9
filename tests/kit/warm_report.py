"""Imported by the test kit's harness server (harness_server.SERVER_PRELOAD): draws one of
each of the report's figures and compiles its HTML template, so that every harness command
forked from the server finds matplotlib's fonts and glyph caches loaded and the template
compiled, as a long-lived process would.

Without it each forked command paid them again at its report's first write: about 0.3
CPU-seconds of a 2-scenario report's 0.36 (the second write of the same report: 0.05),
in a few hundred commands of `make test` (docs/BENCHMARKS.md, "The third session's
figures"). Importing has this side effect on purpose: the server's preload is a list of
modules to import.
"""

from __future__ import annotations

from harness.contract.verdict import Verdict
from harness.run.report import html, plots


def warm() -> None:
    ran = [
        Verdict("warm/tp1-pp1", "pass", "warm-up", settings={"tp": 1, "pp": 1}),
        Verdict("warm/tp2-pp1", "fail", "warm-up", settings={"tp": 2, "pp": 1}),
    ]
    plots.heatmap(ran, {"warm/tp2-pp1"})
    plots.divergence_plot({"name": "warm", "per_position": [1e-4, 3e-2, 2e-3]}, 1e-2)
    html._environment().get_template("report.html.j2")


warm()
