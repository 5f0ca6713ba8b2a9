"""The release x suite compatibility table of docs/ENGINE_VERSIONS.md, from runs.

    python bench/release_table.py reports/RUN [reports/RUN2 ...] [--releases 0.19.1,0.20.2,...]
    harness run $(python bench/release_table.py --ids) --engine-env vllm==V --report-dir reports/rel-table

`--ids` prints the scenarios a release is measured on: the golden setting of an architecture
of every vLLM suite, a compile scenario, and one scenario of each newer axis (the vllm gate's:
prefix cache, chunked prefill, ngram and draft speculation, batch invariance, EP, DP).

Reads every `scenarios/*/verdict.json` of the given run directories. A scenario run with
`--engine-env vllm==V` is named `ID@vllm-V`; one run without it ran the pinned engine,
whose release is in the verdict's `versions`. Prints one markdown row per scenario and
one column per release (oldest first): the verdict, the logits check's max |dlogprob|
against the golden and the scenario's time; then each release's torch and transformers
as the runs recorded them, and a note for each cause of a verdict that is not a pass
(an expected failure's cause as its expectation words it, shared by every cell it explains;
a reason that differs between releases only in pids, rank numbers, release numbers and line
numbers is one cause, one note). Where several runs judged the same cell, the last directory
given wins.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feature_table import max_dlogprob, verdicts  # noqa: E402 - the sibling script's reader

# what a release is measured on: the golden setting of an arch of every vLLM suite and one compile scenario ...
TABLE_IDS = (
    "vllm-llama/tp1-pp1",
    "vllm-qwen3/tp1-pp1",
    "vllm-gemma4/tp1-pp1",
    "vllm-qwen25vl/tp1-pp1",
    "vllm-mm-archs/arch-gemma3-tp1-pp1",
    "vllm-mm-archs/arch-llava-tp1-pp1",
    "vllm-mm-archs/arch-qwen3-vl-tp1-pp1",
    "vllm-mm-video/arch-qwen25-vl-tp1-pp1",
    "vllm-mm-audio/arch-qwen2-audio-tp1-pp1",
    "vllm-mm-evals/tp1-pp1",
    "vllm-moe/arch-qwen3-moe-tp2-pp1",
    "vllm-native-archs/arch-step3-text-tp1-pp1",
    "vllm-llama/tp1-pp2-compile",
)
# ... and one of each newer axis (the vllm gate's own)
AXIS_IDS = (
    "vllm-features/arch-llama-tp1-pp2-compile-prefix_cache",
    "vllm-features/arch-llama-tp2-pp1-chunked_prefill32",
    "vllm-features/arch-llama-tp2-pp1-spec-ngram",
    "vllm-features/arch-llama-tp2-pp1-spec-draft",
    "vllm-features/arch-llama-tp2-pp1-batch_invariant",
    "vllm-moe/arch-qwen3-moe-tp2-pp1-ep",
    "vllm-moe/arch-qwen3-moe-tp1-pp1-dp2",
)


def release_of(verdict: dict) -> tuple[str, str]:
    """(scenario id without the engine env, the engine's release)."""
    scenario, _, env = verdict["scenario"].partition("@")
    versions = verdict.get("versions") or {}
    release = env.removeprefix("vllm-") if env else versions.get("vllm") or versions.get(versions.get("engine", ""), "?")
    return scenario, release


def load(run_dirs: list[Path]) -> dict[tuple[str, str], dict]:
    return {release_of(v): v for v in verdicts(run_dirs)}


def shown(verdict: dict) -> str:
    if verdict["verdict"] == "expected-failure" and verdict.get("observed"):
        return f"expected-failure ({verdict['observed']})"
    return verdict["verdict"]


def cell(verdict: dict, note: int | None) -> str:
    parts = [shown(verdict) + (f" [{note}]" if note else "")]
    if verdict["verdict"] == "pass" and (dl := max_dlogprob(verdict)) != "-":
        parts.append(dl)
    if isinstance(seconds := verdict.get("duration_s"), (int, float)):
        parts.append(f"{seconds:.0f} s")
    return ", ".join(parts)


def cause(verdict: dict) -> str:
    """What a footnote says of a non-pass: an expected failure's cause as its expectation
    words it (one note for every cell it explains), else the verdict's own reason."""
    text = verdict.get("expected_failure") if verdict["verdict"] == "expected-failure" else None
    return " ".join(str(text or verdict.get("reason", "")).split()).replace("|", "\\|")


# what differs between two releases' words for one cause: a process's pid and rank, the release
# itself, the line an unchanged function moved to
VARIES = re.compile(r"rank \S+ \([^)]*\)|pid \d+|rank \d+|\b\d+\.\d+\.\d+\b|_(?:DP|PP|PCP|TP|DCP|EP)\d+|VllmWorker-\d+|\.py:\d+")
# what a verdict adds to its crash's words: the narrowing's interaction, a known bug's near miss
JUDGEMENT = re.compile(r"; interaction: .*| \((?:the failure of|NOT) known bug .*")


def same_cause(text: str) -> str:
    return VARIES.sub("#", JUDGEMENT.sub("", text))


def table(cells: dict[tuple[str, str], dict]) -> list[str]:
    scenarios = sorted({s for s, _ in cells})
    releases = sorted({r for _, r in cells}, key=Version)
    notes: dict[str, int] = {}  # a cause's words with what varies masked -> its number
    texts: dict[int, set[str]] = {}  # its number -> the words of each cell it marks
    lines = ["| scenario | " + " | ".join(f"`{r}`" for r in releases) + " |", "|---|" + "---|" * len(releases)]
    for scenario in scenarios:
        row = []
        for release in releases:
            verdict = cells.get((scenario, release))
            note = None
            if verdict and verdict["verdict"] != "pass":
                note = notes.setdefault(same_cause(cause(verdict)), len(notes) + 1)
                texts.setdefault(note, set()).add(cause(verdict))
            row.append(cell(verdict, note) if verdict else "-")
        lines.append(f"| `{scenario}` | " + " | ".join(row) + " |")
    lines += ["", "| release | torch | transformers |", "|---|---|---|"]
    for release in releases:
        versions = next((v.get("versions") or {} for (_, r), v in cells.items() if r == release and v.get("versions")), {})
        choice = versions.get("transformers_choice") or versions.get("transformers", "?")
        lines.append(f"| {release} | {versions.get('torch', '?')} | {choice} |")
    if notes:
        lines.append("")
        lines += [f"[{n}] {note_text(sorted(texts[n]))}" for n in notes.values()]
    return lines


def note_text(words: list[str]) -> str:
    """One cause's note: its words as one cell has them; where cells' words differ (in what
    VARIES masks), said so."""
    if len(words) == 1:
        return words[0]
    return f"{words[0]} (as {len(words)} cells word it; the others differ only in pids, ranks, releases or line numbers)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path)
    p.add_argument("--releases", help="comma-separated releases to show (default: every release in the runs)")
    p.add_argument("--ids", action="store_true", help="print the scenarios a release is measured on, and stop")
    args = p.parse_args()
    if args.ids:
        print(" ".join((*TABLE_IDS, *AXIS_IDS)))
        return
    if not args.runs:
        p.error("give the run directories to read (or --ids)")
    cells = load(args.runs)
    if args.releases:
        shown = set(args.releases.split(","))
        cells = {key: v for key, v in cells.items() if key[1] in shown}
    print("\n".join(table(cells)))


if __name__ == "__main__":
    main()
