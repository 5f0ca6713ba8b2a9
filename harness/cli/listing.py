"""`harness list`: the scenarios (by id, pattern, suite or gate), or the engines and models."""

from __future__ import annotations

import argparse

from harness import exit_codes
from harness.cli import suites
from harness.cli.options import add_selection

HELP = "list scenarios"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p)
    p.add_argument("--ids-only", action="store_true", help="print bare ids (for scripts and make)")
    p.add_argument("--engines", action="store_true", help="list the engines instead: built in or from installed packages, "
                   "whether each can run here, its axes")
    p.add_argument("--models", action="store_true", help="list the zoo's models instead: built in or from installed packages")


def run(args) -> int:
    if args.engines or args.models:
        return _plugins(args)
    from harness.compare.expectations import describe as describe_expectation

    catalog = suites.load(args)
    chosen, broken = catalog.pick(args.ids, args.gate)
    for s in chosen:
        if args.ids_only:
            print(s.id)
            continue
        notes = "".join(f"  (expected failure: {describe_expectation(x)}: {x.reason})" for x in s.expectations)
        if s.expected_failure and not s.expectations:
            notes = f"  (expected failure: {s.expected_failure})"
        print(f"{s.id:40s} gates={','.join(sorted(s.gates)) or '-'}{notes}")
    # a broken suite the request could have listed: the listing is not the whole answer
    return exit_codes.USAGE if broken else exit_codes.OK


def _plugins(args) -> int:
    """`harness list --engines` / `--models`: one line each, where it comes from and whether it can be used here."""
    if args.engines:
        from harness.engines import axes_text, inventory

        for e in inventory():
            axes = f"  axes: {axes_text(e.axes)}" if e.axes is not None else ""
            runs = f"  models: {e.models_text()}" if e.status in ("ready", "not ready") else ""
            where = f" [{e.path}]" if e.path and not e.origin.startswith("built-in") else ""
            detail = f"  -- {e.detail}" if e.detail else ""
            print(f"{e.name:12s} {e.status:13s} {e.origin}{where}{axes}{runs}{detail}")
    if args.models:
        from harness import zoo
        from harness.engines import engines_text, inventory
        from harness.models import model_type_of

        engines = inventory()  # once, not once per model: it loads every engine module
        for name, origin, status, detail in zoo.inventory():
            kind = model_type_of(name) if status == "ready" else None
            said = f"  ({kind}; engines: {engines_text(kind, engines)})" if kind else ""
            print(f"{name:20s} {status:13s} {origin}{said}{'  ' + detail if detail else ''}")
    return exit_codes.OK
