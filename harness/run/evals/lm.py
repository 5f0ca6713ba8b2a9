"""The lm-eval bridge: requests out (collect), responses back in (score). Harness process only.

Both halves run lm-eval's own evaluation loop (lm_eval.evaluator.evaluate) on the task
built from harness/run/evals/tasks.py, with a stand-in LM:

  collect  a Recorder LM takes lm-eval's `generate_until` requests (context, gen kwargs,
           images) exactly as lm-eval would send them to a model; they become one run-brief
           workload of kind `generate` (token ids through workloads.encode_text).
  score    a Replayer LM answers the same requests (rebuilt by lm-eval with the same
           few-shot seed, and checked to be identical) with the engine's decoded responses;
           lm-eval applies the task's filters and metric and logs every item.

prepare_evals and score_evals do the same for every eval of a suite (the admit and
judge stages, harness/run/stages/). lm-eval is imported only when a task is built.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.inputs.workloads import EOS_ID, IMAGE_MARK, encode_text
from harness.run.evals import tasks as task_registry

# lm-eval's default fewshot_random_seed (simple_evaluate)
FEWSHOT_SEED = 1234
# lm-eval's default when a task sets no max_gen_toks
DEFAULT_MAX_GEN_TOKS = 256

# Built lm-eval tasks with the task's own num_fewshot, per process (several scenarios per
# process): building reads the data and the few-shot pool, which is the expensive part.
_TASKS: dict[tuple, tuple[Any, int]] = {}
# A cached task holds the requests of its latest evaluation: one evaluation at a time
# (`harness run --jobs N` runs scenarios in threads of one process).
_LOCK = threading.RLock()


@dataclass
class PreparedEval:
    eval_def: Any  # harness.inputs.scenarios.schema.EvalDef
    task_name: str
    workload: dict  # run-brief workload of kind "generate"
    # per doc: doc_id, target, prompt_sha256, image
    items: list[dict]
    contexts: list[str]  # lm-eval's context string per item
    # lm-eval's generation kwargs (the same for every item)
    gen_kwargs: dict
    num_fewshot: int
    task: Any = field(repr=False, default=None)  # the lm-eval task object (in-process only)
    # the model's, which scoring decodes with (in-process only)
    tokenizer: Any = field(repr=False, default=None)


@dataclass
class EvalResult:
    task: str
    n: int
    scores: dict[str, float]  # filter -> mean exact_match
    # doc_id, prompt_sha256, target, response, answers {filter}, correct {filter}
    items: list[dict]
    name: str = ""  # the eval's name (EvalDef.name)
    metric: str = "exact_match"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EvalResult:
        return cls(**d)


def collect(eval_def, model_dir: Path, work_dir: Path, gate: str | None, tokenizer) -> PreparedEval:
    """lm-eval's requests for the first eval_def.item_count(gate) test docs, as a workload
    (prompts encoded by the model's `tokenizer`, which its responses are decoded with)."""
    task, task_shots = _task(eval_def.task, eval_def.data)
    num_fewshot = _num_fewshot(task, task_shots, eval_def)
    recorder = _lm_classes()[0]()
    _evaluate(task, recorder, eval_def.item_count(gate), num_fewshot)
    requests = recorder.requests
    if not requests:
        raise ValueError(f"eval '{eval_def.name}': task {eval_def.task} produced no requests")

    model_dir, work_dir = Path(model_dir), Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    config = json.loads((model_dir / "config.json").read_text())

    gen_kwargs = requests[0]["gen_kwargs"]
    for r in requests:
        if r["gen_kwargs"] != gen_kwargs:
            raise ValueError(
                f"eval '{eval_def.name}': lm-eval asks for different generation settings per "
                f"item ({gen_kwargs} vs {r['gen_kwargs']}); one workload needs one setting"
            )
    until = _until(gen_kwargs)
    max_new = eval_def.max_new_tokens or int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))

    encoded = [_encode_request(eval_def.name, r, task, tokenizer, config, work_dir) for r in requests]
    prompts = [ids for ids, _ in encoded]
    items = [item for _, item in encoded]
    images = [item["image"] for item in items]

    workload = {
        "name": f"eval_{eval_def.name}",
        "kind": "generate",
        "prompts": prompts,
        "max_new_tokens": max_new,
        "stop": [tokenizer.encode(s).ids for s in until],
        "eos_token_id": EOS_ID,
    }
    if any(images):
        workload["images"] = images
    return PreparedEval(
        eval_def=eval_def,
        task_name=eval_def.task,
        workload=workload,
        items=items,
        contexts=[r["context"] for r in requests],
        gen_kwargs=gen_kwargs,
        num_fewshot=num_fewshot,
        task=task,
        tokenizer=tokenizer,
    )


def prepare_evals(eval_defs, model_dir: Path, tokenizer, work_dir: Path, gate: str | None) -> list[PreparedEval]:
    """The requests of every eval of a suite, each as one `generate` workload (collect)."""
    return [collect(e, Path(model_dir), Path(work_dir) / "evals" / e.name, gate, tokenizer) for e in eval_defs]


def score_evals(prepared: list[PreparedEval], outputs) -> dict[str, dict]:
    """{eval name: EvalResult dict} from the engine outputs of the eval workloads."""
    results = {}
    for p in prepared:
        fields = outputs.workload(p.workload["name"])
        if "tokens" not in fields:
            raise RuntimeError(f"the engine wrote no tokens for eval workload '{p.workload['name']}'")
        results[p.workload["name"].removeprefix("eval_")] = score(p, fields["tokens"], p.tokenizer).to_dict()
    return results


def _encode_request(name: str, r: dict, task, tokenizer, config: dict, work_dir: Path) -> tuple[list[int], dict]:
    """One lm-eval request -> (prompt ids, item record). The item's image is written as a
    PNG next to the run and hashed with the ids: the pairing key of golden and scenario."""
    doc_id, context, visuals = r["doc_id"], r["context"], r["images"]
    _check_image_marks(name, doc_id, context, visuals)
    ids = encode_text(context, tokenizer, config)
    digest = hashlib.sha256(json.dumps(ids).encode())
    path = None
    if visuals:
        path = work_dir / f"{name}-{doc_id:05d}.png"
        png = _png_bytes(visuals[0])
        if not path.exists() or path.read_bytes() != png:
            path.write_bytes(png)
        digest.update(png)
    item = {
        "doc_id": doc_id,
        "target": str(task.doc_to_target(r["doc"])),
        "prompt_sha256": digest.hexdigest(),
        "image": str(path) if path else None,
    }
    return ids, item


def _check_image_marks(name: str, doc_id: int, context: str, visuals: list) -> None:
    marks = context.count(IMAGE_MARK)
    if len(visuals) > 1:
        raise ValueError(f"eval '{name}': item {doc_id} has {len(visuals)} images; the harness takes one image per item")
    if visuals and marks != 1:
        raise ValueError(
            f"eval '{name}': item {doc_id} has an image but its prompt has "
            f"{marks} '{IMAGE_MARK}' marks (one is needed, where the image goes)"
        )
    if marks and not visuals:
        raise ValueError(f"eval '{name}': item {doc_id}'s prompt has '{IMAGE_MARK}' but no image")


def decode_responses(tokens, tokenizer, until: list[str]) -> list[str]:
    """Each row of the engine's output as the text lm-eval expects back from a model: up to
    the first EOS, -1 padding dropped, special tokens skipped, cut at the first stop string
    (as lm-eval's own models do: s.split(term)[0] for each term of `until`)."""
    rows = tokens.tolist() if hasattr(tokens, "tolist") else list(tokens)
    out = []
    for row in rows:
        ids = []
        for t in row:
            if t == EOS_ID:
                break
            if t >= 0:
                ids.append(int(t))
        text = tokenizer.decode(ids, skip_special_tokens=True)
        for term in until:
            if term:
                text = text.split(term)[0]
        out.append(text)
    return out


def score(prepared: PreparedEval, tokens, tokenizer) -> EvalResult:
    """lm-eval's filters and metric over the engine's generations (tokens: int64 [P, N])."""
    shape = tuple(getattr(tokens, "shape", (len(tokens),)))
    if shape[0] != len(prepared.items):
        raise ValueError(f"eval '{prepared.eval_def.name}': {shape[0]} generations for {len(prepared.items)} prompts")
    responses = decode_responses(tokens, tokenizer, _until(prepared.gen_kwargs))
    replayer = _lm_classes()[1](prepared.contexts, responses)
    out = _evaluate(prepared.task, replayer, len(prepared.items), prepared.num_fewshot)

    samples = out["samples"][prepared.task_name]
    by_doc: dict[int, dict] = {}
    for s in samples:
        entry = by_doc.setdefault(s["doc_id"], {"answers": {}, "correct": {}})
        entry["answers"][s["filter"]] = s["filtered_resps"][0]
        entry["correct"][s["filter"]] = int(s["exact_match"])
    filters = list(by_doc[prepared.items[0]["doc_id"]]["answers"])
    items = []
    for item, response in zip(prepared.items, responses):
        e = by_doc[item["doc_id"]]
        items.append(
            {
                "doc_id": item["doc_id"],
                "prompt_sha256": item["prompt_sha256"],
                "target": item["target"],
                "response": response,
                "answers": e["answers"],
                "correct": e["correct"],
            }
        )
    n = len(items)
    scores = {f: sum(i["correct"][f] for i in items) / n for f in filters}
    # lm-eval's own aggregate must agree with the per-item view
    agg = out["results"][prepared.task_name]
    for f in filters:
        if abs(agg[f"exact_match,{f}"] - scores[f]) > 1e-9:
            raise RuntimeError(f"lm-eval's exact_match,{f} = {agg[f'exact_match,{f}']} but its items give {scores[f]}")
    return EvalResult(task=prepared.task_name, n=n, scores=scores, items=items, name=prepared.eval_def.name)


# ---------------------------------------------------------------- internals


def _task(name: str, data: str | None):
    """The lm-eval task of a harness task on its local files, built once per process (keyed
    on the files' identity, so changed data rebuilds)."""
    files = task_registry.data_files(name, data)
    key = (name, tuple(sorted((s, str(p), _stamp(p)) for s, p in files.items())))
    with _LOCK:
        return _TASKS[key] if key in _TASKS else _build(key, name, data)


def _build(key: tuple, name: str, data: str | None):
    cfg = task_registry.lm_eval_config(name, data)
    from lm_eval.api.task import ConfigurableTask

    _quiet_lm_eval()

    _TASKS[key] = (ConfigurableTask(config=cfg), int(cfg.get("num_fewshot") or 0))
    return _TASKS[key]


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
        return (st.st_size, st.st_mtime_ns)
    except OSError:
        return ()


def _num_fewshot(task, task_shots: int, eval_def) -> int:
    n = eval_def.num_fewshot if eval_def.num_fewshot is not None else task_shots
    if n > 0 and not hasattr(task, "sampler"):
        raise ValueError(f"eval '{eval_def.name}': task {eval_def.task} has no few-shot split; num_fewshot must be 0 (got {n})")
    return n


def _until(gen_kwargs: dict) -> list[str]:
    until = gen_kwargs.get("until", [])
    return [until] if isinstance(until, str) else list(until)


def _evaluate(task, lm, limit: int | None, num_fewshot: int) -> dict:
    """lm-eval's evaluation loop on one task, as simple_evaluate would set it up."""
    from lm_eval.evaluator import evaluate

    with _LOCK:
        task.set_config(key="num_fewshot", value=num_fewshot)
        task.set_fewshot_seed(seed=FEWSHOT_SEED)
        task_dict = {"tasks": {task.config.task: task}, "groups": {}}
        return evaluate(lm=lm, task_dict=task_dict, limit=limit, bootstrap_iters=0, log_samples=True)


def _quiet_lm_eval() -> None:
    """lm-eval's per-task progress bar and notices (custom dataset, metadata...) would
    drown the harness's own progress: errors only. The harness's output says what ran."""
    import functools
    import logging

    import lm_eval.api.task as lm_task
    from tqdm import tqdm

    for name in ("lm_eval", "lm-eval", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # task.py builds requests under a bare tqdm (no switch to turn it off)
    if getattr(lm_task, "tqdm", None) is tqdm:
        lm_task.tqdm = functools.partial(tqdm, disable=True)  # type: ignore[arg-type, misc]  # tqdm is not None here


def _png_bytes(image) -> bytes:
    """An image (PIL) as RGB PNG bytes, written by the harness's own encoder (stable bytes
    across Pillow versions, so prompt hashes are portable)."""
    import numpy as np

    from harness.inputs.images import encode_png

    return encode_png(np.asarray(image.convert("RGB"), dtype=np.uint8))


_CLASSES: tuple | None = None


def _lm_classes():
    """(Recorder, Replayer): lm-eval LM subclasses, defined on first use (lm-eval is heavy)."""
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    from lm_eval.api.model import LM

    class _Base(LM):
        # lm-eval refuses image tasks to models without this
        MULTIMODAL = True

        def loglikelihood(self, requests):
            raise NotImplementedError("harness evals are generate_until tasks")

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError("harness evals are generate_until tasks")

    class Recorder(_Base):
        def __init__(self):
            super().__init__()
            self.requests: list[dict] = []

        def generate_until(self, requests):
            for inst in requests:
                context, gen_kwargs = inst.args[0], inst.args[1]
                extra = inst.args[2] if len(inst.args) > 2 else {}
                visual = extra.get("visual") or []
                visual = visual if isinstance(visual, list) else [visual]
                self.requests.append(
                    {"doc_id": inst.doc_id, "context": context, "gen_kwargs": dict(gen_kwargs), "images": visual, "doc": inst.doc}
                )
            return ["" for _ in requests]

    class Replayer(_Base):
        def __init__(self, contexts: list[str], responses: list[str]):
            super().__init__()
            self.contexts, self.responses = contexts, responses

        def generate_until(self, requests):
            if len(requests) != len(self.contexts):
                raise RuntimeError(f"lm-eval built {len(requests)} requests at scoring, {len(self.contexts)} at collection")
            for i, inst in enumerate(requests):
                if inst.args[0] != self.contexts[i]:
                    raise RuntimeError(
                        f"lm-eval built a different prompt for request {i} (doc {inst.doc_id}) at "
                        "scoring than at collection: the task changed in between"
                    )
            return list(self.responses)

    _CLASSES = (Recorder, Replayer)
    return _CLASSES
