"""`python -m harness.inputs.zoo NAME DIR`: build the zoo model NAME into DIR (not the cache) and
print its checksum beside the one its recipe records.

For checking a zoo model's build on an installation without touching the cache;
tests/test_vllm_unit.py builds the transformers-built models this way, each in a
process of its own. Exits 1 when the checksums differ, 2 for an unknown name.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.inputs import zoo


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m harness.inputs.zoo NAME DIR", file=sys.stderr)
        return 2
    name, out = args[0], Path(args[1])
    try:
        recipe = zoo.get_recipe(name)
    except KeyError as exc:
        print(f"harness.inputs.zoo: {exc.args[0]}", file=sys.stderr)
        return 2
    zoo.build(recipe, out)
    actual = zoo.checkpoint_sha256(out)
    print(f"{name}: built {actual}, recorded {recipe.sha256}")
    return 0 if actual == recipe.sha256 else 1


if __name__ == "__main__":
    sys.exit(main())
