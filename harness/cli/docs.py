"""`harness docs [TOPIC]`: the harness's documentation, from wherever it is installed (the
wheel carries docs/ and the README), so a hint that names a page works in an engine's
repository too."""

from __future__ import annotations

import argparse
import re
import sys

from harness.contract import exit_codes

HELP = "read the documentation: `harness docs` lists the topics, `harness docs engines` prints one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", help="a topic (e.g. readme, design, engines, engine-versions, reliability)")


def run(args: argparse.Namespace) -> int:
    from harness.contract.roots import shipped_docs
    from harness.inputs.scenarios.scenario import nearest_hint

    pages = shipped_docs()
    if not args.topic:
        for topic, path in pages.items():
            first = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.strip()), "")
            print(f"{topic:18s} {first}")
        return exit_codes.OK
    topic = args.topic.lower().removesuffix(".md").replace("_", "-").removeprefix("docs/")
    if topic not in pages:
        hint = nearest_hint(topic, list(pages)).replace("`harness list` shows the ids", "`harness docs` lists them")
        print(f"harness docs: no topic '{args.topic}'{hint}", file=sys.stderr)
        return exit_codes.USAGE
    text = pages[topic].read_text()
    print(text if _in_harness_checkout() else where_the_user_stands(text))
    return exit_codes.OK


# The harness checkout's make targets a user has a command for wherever the harness is installed
MAKE_EQUIVALENTS = {
    "install-vllm": "harness install vllm",
    "pr-gate": "harness run --gate pr",
    "nightly": "harness run --gate nightly",
    "golden": "harness golden",
    "list": "harness list",
}
CHECKOUT_ONLY = "[harness checkout]"
_MAKE = re.compile(r"\bmake ([a-z][a-z0-9.-]*(?:/[a-z0-9._-]+)?|<id>)")
_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)  # fenced blocks, then inline spans


def where_the_user_stands(text: str) -> str:
    """The page as read from an engine's repository, where the harness checkout's Makefile is
    not: each `make` command in code becomes its harness command (`make pr-gate` -> `harness run
    --gate pr`, `make SUITE/ID` -> `harness run SUITE/ID`), and one with none (the harness's
    own tests and benchmarks) is marked as the checkout's. Prose ("make a target") stays."""

    def command(match: re.Match[str]) -> str:
        target = match.group(1)
        if target in MAKE_EQUIVALENTS:
            return MAKE_EQUIVALENTS[target]
        return f"harness run {target}" if "/" in target or target == "<id>" else f"make {target} {CHECKOUT_ONLY}"

    return _CODE.sub(lambda code: _MAKE.sub(command, code.group(0)), text)


def _in_harness_checkout() -> bool:
    """Whether the user stands in the harness's own checkout, where its Makefile is."""
    from harness.contract.roots import source_checkout
    from harness.contract.settings.project import project

    checkout = source_checkout()
    return checkout is not None and project().root.resolve() == checkout.resolve()
