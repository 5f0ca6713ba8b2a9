"""Benchmark: a GSM8K-sized `generate` workload (what a task eval sends) on the
reference engine, tp1 eager, in this process (world size 1).

Prompts are GSM8K 5-shot, as lm-eval builds them: the first five train items as
"Question: ...\\nAnswer: ...\\n\\n", then the test question and "Answer:", encoded with
the zoo tokenizer of tiny-llama, BOS first. Two runs over the same prompts:

  no-stop   max_new_tokens tokens for every prompt (EOS off): the worst case;
  stop      the single token tiny-llama generates most often (found on a pilot run of
            the first prompts) is a stop sequence, so sequences end early at
            different steps and leave the decode batch.

    python bench/generate.py [--prompts 1319] [--max-new 256] [--runs no-stop stop]

Prints a Markdown table: prompts, prompt tokens, generated tokens, seconds (engine
run time: prefill + decode, after load and warm-up), generated tokens per second.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.inputs.zoo import DATA_DIR, load_tokenizer, model_dir  # noqa: E402

SHOTS = 5


def gsm8k_prompts(count: int) -> list[list[int]]:
    tokenizer = load_tokenizer(model_dir("tiny-llama"))
    read = lambda name: [json.loads(line) for line in (DATA_DIR / "gsm8k" / name).read_text().splitlines()]  # noqa: E731
    shots = "".join(f"Question: {d['question']}\nAnswer: {d['answer']}\n\n" for d in read("train.jsonl")[:SHOTS])
    return [[0] + tokenizer.encode(f"{shots}Question: {d['question']}\nAnswer:").ids for d in read("test.jsonl")[:count]]


def run_reference(workload: dict, out: Path) -> dict:
    """The reference engine's worker, world size 1, in this process: outputs + meta."""
    import torch

    from harness.contract.outputs import EngineOutputs
    from harness.contract.runbrief import RunBrief
    from harness.engines.reference.worker import run

    torch.manual_seed(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    settings = {"tp": 1, "pp": 1, "sp": False, "compile": False}
    brief = RunBrief("bench/generate", "reference", str(model_dir("tiny-llama")), "float32", settings, [workload], str(out))
    t0 = time.perf_counter()
    run(brief)
    wall = time.perf_counter() - t0
    result = EngineOutputs.load(out)
    return {"fields": result.workload(workload["name"]), "run_s": result.meta["timings"]["run_s"], "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=1319)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--runs", nargs="+", default=["no-stop", "stop"], choices=["no-stop", "stop"])
    args = ap.parse_args()

    prompts = gsm8k_prompts(args.prompts)
    lens = [len(p) for p in prompts]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        stop = []
        if "stop" in args.runs:
            pilot = run_reference(
                {"name": "pilot", "kind": "generate", "prompts": prompts[:8], "max_new_tokens": min(args.max_new, 64)},
                Path(tmp) / "pilot",
            )
            counts = collections.Counter(t for t in pilot["fields"]["tokens"].flatten().tolist() if t >= 0)
            stop = [[counts.most_common(1)[0][0]]]
        for i, name in enumerate(args.runs):
            w = {
                "name": "eval_gsm8k",
                "kind": "generate",
                "prompts": prompts,
                "max_new_tokens": args.max_new,
                "stop": stop if name == "stop" else [],
                "eos_token_id": None,
            }
            r = run_reference(w, Path(tmp) / f"run{i}")
            gen = int(r["fields"]["lengths"].sum())
            stopped = int((r["fields"]["lengths"] < args.max_new).sum())
            rows.append((name, w["stop"], gen, stopped, r["run_s"], r["wall_s"]))
            print(f"{name}: {gen} tokens in {r['run_s']:.1f} s", file=sys.stderr, flush=True)

    import torch

    print(
        f"### GSM8K-sized generate, {len(prompts)} prompts of {min(lens)}-{max(lens)} tokens "
        f"(mean {sum(lens) / len(lens):.0f}), max_new_tokens {args.max_new}, "
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}\n"
    )
    print(
        "| run | stop | generated tokens | sequences stopped early | run (s) | generated tok/s | wall incl. load + warm-up (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, stop_ids, gen, stopped, run_s, wall in rows:
        print(f"| {name} | {stop_ids or '-'} | {gen} | {stopped} | {run_s:.1f} | {gen / run_s:.0f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
