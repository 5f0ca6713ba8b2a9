"""`harness docs [TOPIC]`: the harness's documentation, from wherever it is installed (the
wheel carries docs/ and the README), so a hint that names a page works in an engine's
repository too."""

from __future__ import annotations

import argparse
import sys

from harness import exit_codes

HELP = "read the documentation: `harness docs` lists the topics, `harness docs engines` prints one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", help="a topic (e.g. readme, design, engines, engine-versions, reliability)")


def run(args) -> int:
    from harness.config.scenario import nearest_hint
    from harness.roots import shipped_docs

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
    print(pages[topic].read_text())
    return exit_codes.OK
