"""The report's pictures, as PNG data URIs so the HTML needs nothing beside it.

Figures are built as matplotlib `Figure` objects (Agg), never through pyplot's global
state, so reports can be drawn from several threads.
"""

from __future__ import annotations

import base64
import io
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from harness.contract.jsonfile import JSONObject
from harness.contract.verdict import Verdict  # noqa: E402

if TYPE_CHECKING:
    from harness.run.report.regressions import Band

COLORS = {
    "pass": "#4caf50",
    "fail": "#e53935",
    "crash": "#8e24aa",
    "hang": "#fb8c00",
    "error": "#795548",
    "unsupported": "#bdbdbd",
    "expected-failure": "#90caf9",
    "pass (unexpected)": "#fdd835",
    "not run": "#f5f5f5",
}
CATEGORIES = list(COLORS)


def to_data_uri(fig: Figure, tight: bool = True) -> str:
    """`tight`: crop to what was drawn (legends outside the axes need it), at the price
    of drawing the figure twice; a figure with fixed margins passes False."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight" if tight else None)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def verdict_label(v: Verdict) -> str:
    return "pass (unexpected)" if v.unexpected_pass else v.verdict


def cell_note(v: Verdict) -> str:
    """The key number a heat-map cell shows under its verdict."""
    if v.crash:
        return f"rank {v.crash['rank']}"
    if v.hang:
        return "ranks " + ",".join(sorted(v.hang.get("stuck_at", {})))
    for c in v.checks:
        if c["kind"] == "logprobs" and "max_abs_dlogprob" in c.get("metrics", {}):
            return f"{c['metrics']['max_abs_dlogprob']:.1e}"
    return ""


def _grid_axes(verdicts: list[Verdict]) -> tuple[str | None, str | None, list[str]]:
    """Rows and columns: the first two non-boolean axes (tp, pp); panels: the rest (sp, compile)."""
    axes = list(verdicts[0].settings)
    numeric = [a for a in axes if not all(isinstance(v.settings.get(a), bool) for v in verdicts)]
    rows = numeric[0] if numeric else None
    cols = numeric[1] if len(numeric) > 1 else None
    return rows, cols, [a for a in axes if a not in (rows, cols)]


def _values(verdicts: list[Verdict], axis: str | None) -> list[object]:
    if axis is None:
        return [None]
    return sorted({v.settings.get(axis) for v in verdicts}, key=lambda x: (str(type(x)), x))


def _panel_title(panel_axes: list[str], combo: tuple[object, ...]) -> str:
    if not panel_axes:
        return ""
    return ", ".join(f"{a}={'on' if val is True else 'off' if val is False else val}" for a, val in zip(panel_axes, combo))


# Inches per heat-map cell and around the cells: the figure is sized by its cells, so a
# one-cell suite is drawn one cell big (imshow would stretch it over a fixed figure).
CELL_W, CELL_H = 1.1, 0.62
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM, PANEL_GAP = 0.6, 0.15, 0.35, 0.35, 0.75
# What a cell's number is (cell_note), in the picture itself: it travels without the page.
CELL_LABEL = "number under the verdict: max |dlogprob| vs golden"


@dataclass
class Panel:
    """One panel of a suite's heat map: a combination of the panel axes (sp, compile),
    its rows and columns, and its verdicts by (row value, column value)."""

    title: str
    rows: list[object]
    cols: list[object]
    cells: dict[tuple[object, object], Verdict]


def heat_panels(verdicts: list[Verdict]) -> tuple[str | None, str | None, list[Panel]]:
    """The panels holding at least one scenario, each with only the rows and columns in
    which something ran: a PR gate runs a few scenarios of a large matrix, and the full
    grid of every panel would be mostly "not run"."""
    row_axis, col_axis, panel_axes = _grid_axes(verdicts)
    grouped: dict[tuple[object, ...], list[Verdict]] = {}
    for v in verdicts:
        grouped.setdefault(tuple(v.settings.get(a) for a in panel_axes), []).append(v)
    panels = []
    for combo in sorted(grouped, key=str):
        mine = grouped[combo]
        cells = {(_setting(v, row_axis), _setting(v, col_axis)): v for v in mine}
        panels.append(Panel(_panel_title(panel_axes, combo), _values(mine, row_axis), _values(mine, col_axis), cells))
    return row_axis, col_axis, panels


def _setting(v: Verdict, axis: str | None) -> object:
    return v.settings.get(axis) if axis else None


def _panel_figure(panels: list[Panel]) -> tuple[Figure, list[Axes]]:
    """A figure whose every cell is CELL_W x CELL_H inches, panels side by side."""
    widths = [len(p.cols) * CELL_W for p in panels]
    width = sum(widths) + PANEL_GAP * (len(panels) - 1) + MARGIN_LEFT + MARGIN_RIGHT
    height = max(len(p.rows) for p in panels) * CELL_H + MARGIN_TOP + MARGIN_BOTTOM
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(
        1,
        len(panels),
        width_ratios=widths,
        left=MARGIN_LEFT / width,
        right=1 - MARGIN_RIGHT / width,
        bottom=MARGIN_BOTTOM / height,
        top=1 - MARGIN_TOP / height,
        wspace=PANEL_GAP / (sum(widths) / len(panels)),
    )
    return fig, [fig.add_subplot(grid[0, i]) for i in range(len(panels))]


def _draw_panel(ax: Axes, panel: Panel, row_axis: str | None, col_axis: str | None, new_failures: set[str]) -> None:
    codes = np.full((len(panel.rows), len(panel.cols)), CATEGORIES.index("not run"))
    for r, c in itertools.product(range(len(panel.rows)), range(len(panel.cols))):
        v = panel.cells.get((panel.rows[r], panel.cols[c]))
        if v is None:
            ax.text(c, r, "not run", ha="center", va="center", fontsize=8, color="#9e9e9e")
            continue
        codes[r, c] = CATEGORIES.index(verdict_label(v))
        new = v.scenario in new_failures
        # a new failure's verdict moves down a little, clear of the NEW over it in a low cell
        ax.text(c, r + (0.1 if new else 0), f"{verdict_label(v)}\n{cell_note(v)}", ha="center", va="center", fontsize=8)
        if new:
            ax.add_patch(Rectangle((c - 0.48, r - 0.48), 0.96, 0.96, fill=False, linewidth=3, edgecolor="black"))
            ax.text(c, r - 0.28, "NEW", ha="center", va="center", fontsize=7, fontweight="bold")
    cmap = ListedColormap([COLORS[c] for c in CATEGORIES])
    # the aspect keeps cells their size in a panel with fewer rows than the tallest one
    ax.imshow(codes, cmap=cmap, vmin=0, vmax=len(CATEGORIES) - 1, aspect=CELL_H / CELL_W)
    ax.set_anchor("N")
    ax.set_xticks(range(len(panel.cols)), [f"{col_axis}={c}" if col_axis else "" for c in panel.cols], fontsize=8)
    ax.set_yticks(range(len(panel.rows)), [f"{row_axis}={r}" if row_axis else "" for r in panel.rows], fontsize=8)
    ax.set_title(panel.title, fontsize=9)


def heatmap(verdicts: list[Verdict], new_failures: set[str]) -> str | None:
    """One suite's matrix: rows x columns (tp x pp) per panel (sp/compile), each cell
    coloured by verdict and annotated with its key number; new failures framed in black."""
    verdicts = [v for v in verdicts if v.settings]
    if not verdicts:
        return None
    row_axis, col_axis, panels = heat_panels(verdicts)
    fig, axes = _panel_figure(panels)
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, row_axis, col_axis, new_failures)
    shown = sorted({verdict_label(v) for v in verdicts}, key=CATEGORIES.index)
    fig.legend(
        handles=[Patch(color=COLORS[c], label=c) for c in shown],
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        ncol=min(len(shown), 3),
        fontsize=7,
        frameon=False,
        title=CELL_LABEL,
        title_fontsize=7,
    )
    return to_data_uri(fig)


def divergence_plot(check: JSONObject, bound: float | None) -> str | None:
    """Per-position |delta logprob| of a logprobs check against its tolerance."""
    values = np.asarray(check.get("per_position") or [], dtype=float)
    if values.size == 0:
        return None
    floor = 1e-9  # exact zeros on a log axis
    shown = np.maximum(values, floor)
    fig = Figure(figsize=(8, 2.6))
    # fixed margins instead of a tight crop: one draw instead of two, and this plot is
    # drawn for every logprobs check of every scenario (most of a report's writing time)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.17, top=0.89)
    ax = fig.add_subplot()
    ax.plot(np.arange(values.size), shown, linewidth=0.8, color="#1e88e5", label="|delta logprob|")
    if bound is not None:
        ax.axhline(bound, color="#e53935", linestyle="--", linewidth=1, label=f"tolerance {bound:g}")
        over = values > bound
        ax.scatter(np.flatnonzero(over), shown[over], s=8, color="#e53935", zorder=3, label="beyond tolerance")
    ax.set_yscale("log")
    # the decades are what a reader compares; a log axis's minor ticks cost a quarter of the drawing
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("position (all prompts, concatenated)")
    ax.set_ylabel("|delta logprob|")
    ax.set_title(f"{check['name']}: per-position |delta logprob| vs golden", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return to_data_uri(fig, tight=False)


def trend_plot(rows: pd.DataFrame, column: str, current_run: str, band: Band | None = None) -> str | None:
    """A metric over past runs, one line per scenario; the current run marked, and
    (for one scenario) its noise band shaded."""
    data = rows.dropna(subset=[column])
    if data.empty:
        return None
    fig = Figure(figsize=(8, 2.8))
    ax = fig.add_subplot()
    runs = list(dict.fromkeys(data.sort_values("started")["run_id"]))
    position = {run: i for i, run in enumerate(runs)}
    for scenario, group in data.groupby("scenario"):
        ax.plot([position[r] for r in group["run_id"]], group[column], marker="o", markersize=3, linewidth=1, label=scenario)
    if band is not None:
        ax.axhspan(band.low, band.high, color="#90caf9", alpha=0.35, label="noise band")
    if current_run in position:
        ax.axvline(position[current_run], color="#757575", linestyle=":", linewidth=1)
    values = data[column].astype(float)
    if (values > 0).all() and values.max() / values.min() > 100:
        ax.set_yscale("log")
    step = max(1, len(runs) // 12)
    ax.set_xticks(range(0, len(runs), step), [runs[i] for i in range(0, len(runs), step)], rotation=30, ha="right", fontsize=7)
    ax.set_title(column.split(".", 1)[1], fontsize=10)
    if data["scenario"].nunique() <= 16:
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return to_data_uri(fig)
