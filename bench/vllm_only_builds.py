"""Which architectures only vLLM defines the generic route builds, proven by vLLM loading them
(issue 62 item 4; harness/inputs/models/tiny_vllm.py).

    python bench/vllm_only_builds.py [--only GLOB] [--build-timeout-s 300] [--load-timeout-s 240] [--out FILE]

For every text generator of the installed vLLM's registry that transformers has no class for
(tiny_vllm.builds), and that the registry does not refuse here: the tiny checkpoint is built as
`harness archs --try-build` builds it (attempts.attempt_build: cached, a refusal recorded), then
loaded by vLLM TP1 eager on CPU in float32 in a process of its own, which generates 4 tokens.
vLLM's loader refuses a checkpoint that leaves a parameter unset ("Following weights were not
initialized from checkpoint"), so a load is the proof that the checkpoint is complete. One line
per architecture: `built+loaded`, `builder refused: ...` or `vLLM refused: ...`, then the counts.
A vLLM run is one at a time (`flock /tmp/harness-heavy.lock` around each, on a shared machine).
Each load's answer is kept beside the build's (attempts.record_load, per vLLM version), so a
second run loads nothing again and `harness archs` says it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.engines import get_engine  # noqa: E402
from harness.engines.base import is_text_generator  # noqa: E402
from harness.inputs import models  # noqa: E402
from harness.inputs.models import attempts, tiny_vllm  # noqa: E402

LOCK = "/tmp/harness-heavy.lock"
LOAD_CODE = """
import sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, tensor_parallel_size=1, max_model_len=256,
          max_num_seqs=1, trust_remote_code=False, seed=0)
out = llm.generate(["The answer is"], SamplingParams(max_tokens=4, temperature=0.0))
print("GENERATED", len(out[0].outputs[0].token_ids))
"""


def vllm_only_archs(engine) -> tuple[list[str], dict[str, str]]:
    """The registry's vLLM-only text generators, and the registry's refusals among them."""
    registry = engine.model_registry()
    archs = sorted(a for a in registry if is_text_generator(a) and tiny_vllm.builds(a))
    return archs, {a: registry[a]["reason"] for a in archs if registry[a].get("reason")}


def load(python: str, directory: str, timeout_s: float) -> str | None:
    """None when vLLM loads the checkpoint and generates; else vLLM's words (its last error line)."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_NO_USAGE_STATS": "1"}
    argv = ["flock", LOCK, "timeout", "-k", "10", str(int(timeout_s)), python, "-c", LOAD_CODE, directory]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode == 0 and "GENERATED 4" in done.stdout:
        return None
    if done.returncode in (124, 137):
        return f"did not load and generate within {timeout_s:g} s"
    return _last_error(done.stderr) or f"exit {done.returncode}"


@contextlib.contextmanager
def heavy():
    """The machine's lock for heavy runs, held while one runs."""
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# what vLLM's front end says after its engine core died: the root cause is the core's own error above
WRAPPERS = ("EngineDeadError", "Engine core initialization failed", "EngineCore encountered an issue")


def _last_error(stderr: str) -> str:
    """The root cause in a failed vLLM run's stderr: its last exception line that is not the
    front end's report of the engine core's death."""
    # a line of vLLM's engine core process comes prefixed "(EngineCore pid=N) "
    lines = [re.sub(r"^\([^)]*\)\s*", "", ln.strip()) for ln in stderr.splitlines() if ln.strip()]
    raised = [
        ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b.*:", ln) and not any(w in ln for w in WRAPPERS)
    ]
    errors = [ln for ln in lines if "Error" in ln and not ln.startswith(("File ", "WARNING", "INFO"))]
    return " ".join((raised or errors or lines or [""])[-1].split())[:300]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", default=[], metavar="GLOB")
    p.add_argument("--build-timeout-s", type=float, default=attempts.BUILD_TIMEOUT_S)
    p.add_argument("--load-timeout-s", type=float, default=240.0)
    p.add_argument("--out", type=Path, help="write {arch: {state, said}} as JSON")
    args = p.parse_args()
    engine = get_engine("vllm")
    python = str(engine.python())
    archs, refusals = vllm_only_archs(engine)
    archs = [a for a in archs if not args.only or any(fnmatch.fnmatchcase(a, g) for g in args.only)]
    results = {}
    for arch in archs:
        start = time.monotonic()
        results[arch] = _one(arch, python, engine.versions().get("vllm", "?"), refusals.get(arch), args)
        state, said = results[arch]["state"], results[arch]["said"]
        print(f"{arch:45s} {state}{': ' + said if said else ''} ({time.monotonic() - start:.0f} s)", flush=True)
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    print(f"\n{len(results)} vLLM-only architectures: " + "; ".join(f"{s}: {n}" for s, n in sorted(counts.items())))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


def _one(arch: str, python: str, version: str, registry_refusal: str | None, args) -> dict:
    if registry_refusal:
        return {"state": "vLLM refused", "said": registry_refusal}
    builder = models.builder_python(python, arch=arch)
    attempt = attempts.known_attempt(arch, builder)
    if attempt is None or attempt.timed_out:
        with heavy():  # the build imports vLLM and makes its model (on the meta device)
            attempt = attempts.attempt_build(arch, builder, args.build_timeout_s)
    if not attempt.built:
        return {"state": "builder refused", "said": attempt.said}
    known = attempts.recorded_load(attempt.said, version)
    if known is None:
        said = load(python, attempt.said, args.load_timeout_s)
        if not said or "within" not in said:  # a load cut short by time is tried again next run
            attempts.record_load(attempt.said, version, said)
        known = (said is None, said or "")
    return {"state": "built+loaded", "said": ""} if known[0] else {"state": "vLLM refused", "said": known[1]}


if __name__ == "__main__":
    sys.exit(main())
