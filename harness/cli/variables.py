"""`harness env`: every HARNESS_* environment variable, its value here and what it does."""

from __future__ import annotations

import argparse

from harness.contract import exit_codes
from harness.contract.settings.variables import listing

HELP = "list the HARNESS_* environment variables: value here, default, what each does"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", help="also those the harness sets for its own processes and its tests")


def run(args: argparse.Namespace) -> int:
    print(listing(("user", "internal", "tests") if args.all else ("user",)))
    return exit_codes.OK
