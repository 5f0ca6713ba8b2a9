"""The scenario files a command reads: each loaded on its own, a broken one said on
stderr and set aside (harness/inputs/scenarios/loading.py), never the end of every command."""

from __future__ import annotations

import argparse
import sys

from harness.contract.jsonfile import JSONObject
from harness.inputs.scenarios.loading import BrokenSuite, Catalog, load_catalog
from harness.inputs.scenarios.scenario import Scenario, find_one
from harness.inputs.scenarios.schema import ScenarioError


def load(args: argparse.Namespace, who: str = "harness") -> Catalog:
    """The catalog of --scenarios (default: the project's and the built-in suites), every
    broken file's problem printed once."""
    catalog = load_catalog(args.scenarios)
    for broken in catalog.broken:
        print(f"{who}: scenario file skipped: {broken.problem}", file=sys.stderr)
    for notice in catalog.notices:
        print(f"{who}: {notice}", file=sys.stderr)
    return catalog


def where_from(args: argparse.Namespace) -> JSONObject:  # kept in run.json
    """Which project config a command used (possibly one in a parent directory) and where
    its scenario files came from: printed at a run's start and kept in run.json."""
    from harness.contract.roots import scenario_paths
    from harness.contract.settings.project import project

    here = project()
    paths = args.scenarios or scenario_paths()
    return {
        "config": str(here.config_file) if here.config_file else None,
        "root": str(here.root),
        "scenarios": [str(p) for p in paths],
    }


def find_one_in(catalog: Catalog, scenario_id: str) -> Scenario:
    """One scenario by id; an id of a suite whose file is broken says that file's problem."""
    try:
        return find_one(catalog.scenarios, scenario_id)
    except ScenarioError:
        hit = [b for b in catalog.broken if b.could_be_in([scenario_id], None)]
        if hit:
            raise ScenarioError(
                f"'{scenario_id}' is of suite '{hit[0].suite}', whose file cannot be used: {hit[0].problem}"
            ) from None
        raise


def broken_note(broken: list[BrokenSuite]) -> str:
    return ", ".join(f"{b.suite} ({b.path})" for b in broken)
