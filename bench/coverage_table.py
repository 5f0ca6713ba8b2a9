"""The coverage table of docs/ARCHITECTURES.md: per suite, how many of the pairs and triples
of axis values (the arch axis included) its scenarios run together, and how many its rules
and excludes leave out.

    python bench/coverage_table.py [SUITE ...] [--together A,B]   (default: every suite)

A combination is feasible when some setting keeps every rule of the axes, of the suite's
engine and of the suite's `exclude:` with it (harness/inputs/scenarios/covering.py); "covered" counts
the feasible ones some scenario of the suite runs. The last rows total the vllm suites as
one set of scenarios (missing axes at their defaults): how many pairs of non-default values
meet anywhere.
"""

from __future__ import annotations

import argparse
import itertools
import json

from harness.contract.axes import AXES, filled
from harness.inputs.scenarios.binding import coverage_together, engine_rules
from harness.inputs.scenarios.covering import coverage
from harness.inputs.scenarios.loading import load_scenarios


def suite_rows(names: list[str]) -> list[str]:
    by_suite: dict[str, list] = {}
    for s in load_scenarios():
        if not names or s.suite.suite in names:
            by_suite.setdefault(s.suite.suite, []).append(s)
    lines = [
        "| suite | engine | kind | scenarios | as the suite asks: covered / feasible (excluded) "
        "| pairs covered / feasible (excluded) | triples covered / feasible (excluded) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, scenarios in sorted(by_suite.items()):
        suite = scenarios[0].suite
        plain = suite.model_copy(update={"covering": None})  # the plain t-way count, whatever the suite asks
        rules = engine_rules(suite.engine)
        cells = ["-"]
        if suite.covering:
            own = coverage(suite, [s.settings for s in scenarios], rules, suite.covering.strength)
            cells = [f"{own.covered} / {own.feasible} ({own.required - own.feasible})"]
        for t in (2, 3):
            got = coverage(plain, [s.settings for s in scenarios], rules, t)
            cells.append(f"{got.covered} / {got.feasible} ({got.required - got.feasible})")
        kind = (
            f"covering {suite.covering.strength}" + ("+groups" if suite.covering.groups else "")
            if suite.covering
            else "full product"
        )
        lines.append(f"| {name} | {suite.engine} | {kind} | {len(scenarios)} | {' | '.join(cells)} |")
    return lines


def together(names: list[str], strength: int = 3) -> str:
    """The named suites of one engine as one set of scenarios: every `strength`-way combination
    of axis values (the arch aside, the engine's axes no suite varies included) in some
    suite's scenario, the installed engine's limits excluded (`harness list --coverage A B`)."""
    by_suite: dict[str, list] = {}
    for s in load_scenarios():
        if s.suite.suite in names:
            by_suite.setdefault(s.suite.suite, []).append(s)
    got = coverage_together(by_suite, strength)
    return (
        f"{' + '.join(by_suite)} together: {sum(len(ss) for ss in by_suite.values())} scenarios; {strength}-way of "
        f"axis values: {got.covered} covered / {got.feasible} feasible ({got.required - got.feasible} excluded), "
        f"{len(got.missed)} feasible and not run"
    )


def nondefault_pairs(engine: str) -> str:
    """Across every suite of `engine`: the pairs of non-default values of two declared axes
    that some scenario runs together, against all such pairs of the values the suites use."""
    scenarios = [s for s in load_scenarios() if s.suite.engine == engine]
    values: dict[str, set] = {}
    met = set()
    for s in scenarios:
        settings = filled(s.engine_settings)
        on = [(a, json.dumps(v)) for a, v in settings.items() if a in AXES and AXES[a].is_on(v)]
        for a, v in on:
            values.setdefault(a, set()).add(v)
        met |= {frozenset(p) for p in itertools.combinations(on, 2) if p[0][0] != p[1][0]}
    every = {
        frozenset(((a, v), (b, w))) for a, b in itertools.combinations(sorted(values), 2) for v in values[a] for w in values[b]
    }
    never = sorted(" + ".join(f"{a}={v}" for a, v in sorted(p)) for p in every - met)
    return (
        f"{engine}: {len(scenarios)} scenarios; {len(met & every)} of {len(every)} pairs of non-default axis values "
        f"meet; never: {', '.join(never) or 'none'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="*")
    parser.add_argument(
        "--together",
        action="append",
        default=[],
        metavar="A,B",
        help="suites of one engine counted as one set (e.g. vllm-features,vllm-moe)",
    )
    args = parser.parse_args()
    print("\n".join(suite_rows(args.suites)))
    print()
    for names in args.together:
        print(together(names.split(",")))
    for engine in ("vllm", "reference"):
        print(nondefault_pairs(engine))


if __name__ == "__main__":
    main()
