"""Which architectures the generic tiny-checkpoint builder (harness/inputs/models/tiny.py) can
build, with the engine's own transformers: the candidate list of an arch sweep.

    python bench/arch_builds.py [--python .venv-vllm/bin/python] [--out archs.json]

Lists every architecture that the installed vLLM serves and that is also a transformers
class ending in ForCausalLM / LMHeadModel, builds each (cached under the harness's cache
root, so a second run is quick) and prints built / refused with the refusal, then the
counts. Numbers for this machine are in docs/ARCHITECTURES.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.inputs import models  # noqa: E402
from harness.inputs.models import ArchModel  # noqa: E402

LIST_CODE = """
import json, transformers
from vllm.model_executor.models.registry import ModelRegistry
served = ModelRegistry.get_supported_archs()
print(json.dumps(sorted(a for a in served if hasattr(transformers, a)
                        and a.endswith(("ForCausalLM", "LMHeadModel")))))
"""


def candidates(python: str) -> list[str]:
    done = subprocess.run([python, "-c", LIST_CODE], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=str(ROOT / ".venv-vllm" / "bin" / "python"), help="the engine's interpreter")
    p.add_argument("--out", type=Path, help="write {arch: result} as JSON")
    args = p.parse_args()
    results = {}
    for arch in candidates(args.python):
        start = time.monotonic()
        try:
            directory = models.build_tiny(ArchModel(arch=arch), args.python)
            results[arch] = {"built": str(directory)}
        except models.ModelError as exc:
            results[arch] = {"refused": " ".join(str(exc).split())[:300]}
        results[arch]["seconds"] = round(time.monotonic() - start, 1)
        print(f"{arch:40s} {'built' if 'built' in results[arch] else 'REFUSED: ' + results[arch]['refused']}", flush=True)
    built = sum("built" in r for r in results.values())
    print(f"\n{built} of {len(results)} architectures built")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
