"""`harness install ENGINE[==VERSION]`: an engine's environment, from anywhere (the harness's
checkout or an engine's repository), saying what it does as it goes."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from harness.contract import exit_codes

if TYPE_CHECKING:
    from harness.engines import Engine

HELP = "install an engine: ENGINE (its default environment, e.g. vllm into .venv-vllm) or ENGINE==VERSION (a release, cached)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "engine",
        metavar="ENGINE[==VERSION]",
        help="e.g. vllm, or vllm==0.22.1 (installed once into the harness's cache, as --engine-env installs releases)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.engines import EngineUnavailable, get_engine
    from harness.inputs import engine_envs

    name, _, version = args.engine.partition("==")
    try:
        engine = get_engine(name.strip())
    except EngineUnavailable as exc:
        print(f"harness install: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    try:
        if version:
            env = engine_envs.resolve(engine_envs.parse_engine_env(args.engine), engine.name, say=_say)
            python = env.python
            print(f"harness install: {env.label} in {python}; run with --engine-env {args.engine}")
        else:
            python = engine.install_default(_say)
            print(f"harness install: {engine.name} in {python}")
            _say_what_it_runs(engine)
    except NotImplementedError as exc:
        print(f"harness install: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except (engine_envs.EngineEnvError, RuntimeError, OSError) as exc:
        print(f"harness install: {exc}", file=sys.stderr)
        return exit_codes.NOT_AS_EXPECTED
    return exit_codes.OK


def _say(line: str) -> None:
    print(line, flush=True)


def _say_what_it_runs(engine: Engine) -> None:
    """Ask the new install what it runs now, once: the answer is cached, so `harness list
    --engines` and `harness init` after it answer at once (vLLM's probe is slow). An
    install whose engine cannot be asked (it does not import) raises EngineUnavailable: a
    RuntimeError, the install's failure."""
    _axes, cut = engine.installed_axes(_say)
    for axis, why in cut.items():
        print(f"harness install: {engine.name} here runs no {axis}: {why}")
