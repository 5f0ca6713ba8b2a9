"""Evidence for the Granite 4 Vision PP finding (docs/ARCHITECTURES.md, the multimodal sweep).

    python -m harness repro vllm-mm-archs/arch-granite4-vision-tp1-pp2-compile --out /tmp/granite4
    python bench/evidence/granite4_vision_pp_deepstack.py /tmp/granite4/repro.py [--python .venv-vllm/bin/python]

vLLM 0.32's Granite4VisionForConditionalGeneration.forward (granite4_vision.py:872-906)
hands the language model slices of its persistent deepstack buffers
(`self._ds_buffers[lvl][:n]`), and zeroes those buffers as soon as the language model
returns. On a PP rank that is not the last, what the language model returns is the
IntermediateTensors for the next stage, and it forwards the deepstack features of the
later stages' layers as they are (Granite4VisionLLMModel.forward, :284-291): views of
those same buffers. So they are zeros by the time vLLM sends them, and the next stage
adds nothing where the image's features belong. Text-only prompts are untouched.

This runs the harness's standalone repro script twice with vLLM's interpreter: as
installed, and with one change loaded into every vLLM process through a sitecustomize
module: the language model's IntermediateTensors carry copies of those features
(`.clone()`), so zeroing the buffers cannot reach them.

Measured (vLLM 0.32.0 CPU, 2026-11-26): as installed, logits 0.342 off (201 of 252
positions), greedy 1 of 2 prompts identical (the text-only one). With the copies, the
teacher-forced logits agree to 9.5e-7: the aliasing is the whole of the prefill's
error. Greedy still differs (0 of 2 identical, 0.112 at step 0 of the image prompt): a
second cause in the decode path that this change does not reach, not yet found (first
suspect: the same persistent buffers shared by the micro-batches PP keeps in flight).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Loaded by every Python process that has its folder on PYTHONPATH (vLLM's workers too):
# once vLLM's granite4_vision module is imported, its language model's forward returns
# IntermediateTensors whose deepstack entries are copies.
SITECUSTOMIZE = """
import importlib.abc
import importlib.machinery
import sys

TARGET = "vllm.model_executor.models.granite4_vision"


def _patch(module):
    cls = module.Granite4VisionLLMModel
    forward = cls.forward

    def forward_with_copies(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        if isinstance(out, module.IntermediateTensors):
            out = module.IntermediateTensors(
                {k: v if k == "hidden_states" else v.clone() for k, v in out.tensors.items()})
        return out

    cls.forward = forward_with_copies


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
"""


def run(repro: Path, python: str, extra_path: str | None) -> str:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(repro), "--python", python], capture_output=True, text=True, env=env)
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip().startswith(("RESULT", "[FAIL]", "[ok]"))]
    return "\n".join(lines) or done.stdout[-2000:] + done.stderr[-2000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repro", type=Path, help="repro.py written by `harness repro` for the pp2 scenario")
    parser.add_argument("--python", default=".venv-vllm/bin/python", help="vLLM's interpreter")
    args = parser.parse_args()
    print("as installed:", run(args.repro, args.python, None), sep="\n")
    with tempfile.TemporaryDirectory() as patch_dir:
        Path(patch_dir, "sitecustomize.py").write_text(SITECUSTOMIZE)
        print(
            "with the deepstack features copied before the buffers are zeroed:", run(args.repro, args.python, patch_dir), sep="\n"
        )


if __name__ == "__main__":
    main()
