"""The lm-eval bridge (harness/run/evals/lm.py, tasks.py): lm-eval's own gsm8k prompts, filters
and metric on local data, offline; Geo3K parquets with one image per item."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.inputs.scenarios.schema import EvalDef
from harness.inputs.workloads import BOS_ID, EOS_ID, encode_text
from harness.inputs.zoo import DATA_DIR, load_tokenizer, model_dir
from harness.run.evals import lm, tasks

JANET = "Janet’s ducks lay 16 eggs per day."


@pytest.fixture(scope="module")
def text_model():
    return model_dir("tiny-llama")


@pytest.fixture(scope="module")
def vl_model():
    return model_dir("tiny-llama-vl")


def lm_eval_gsm8k_yaml() -> dict:
    """lm-eval's own gsm8k config, read independently of harness/run/evals/tasks.py."""
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k.yaml")


def tokens_of(texts, tokenizer, pad_to=None):
    rows = [t if isinstance(t, list) else tokenizer.encode(t).ids for t in texts]
    n = pad_to or max(len(r) for r in rows)
    return torch.tensor([r + [-1] * (n - len(r)) for r in rows], dtype=torch.int64)


def write_arith(d: Path, n_train=6, n_test=3) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for split, n, base in (("train", n_train, 2), ("test", n_test, 40)):
        with open(d / f"{split}.jsonl", "w") as f:
            for i in range(n):
                a, b = base + i, 5 + i
                f.write(
                    json.dumps(
                        {
                            "question": f"Sam has {a} apples and buys {b} more. How many apples does Sam have now?",
                            "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
                        }
                    )
                    + "\n"
                )
    return d


def write_geo3k(path: Path, colors=((200, 0, 0), (0, 200, 0), (0, 0, 200)), images_per_item=1) -> Path:
    from datasets import Dataset, Features, Image, Sequence, Value
    from PIL import Image as PILImage

    problems = ["<image>Find x.", "<image>Find y.", "<image>Find the value of z."]
    answers = ["3", "12", "7.5"]
    ds = Dataset.from_dict(
        {
            "images": [[PILImage.new("RGB", (32, 32), c)] * images_per_item for c in colors],
            "problem": problems,
            "answer": answers,
        },
        features=Features({"images": Sequence(Image()), "problem": Value("string"), "answer": Value("string")}),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(path))
    return path


# ---------------------------------------------------------------- gsm8k is lm-eval's gsm8k


def test_gsm8k_requests_are_lm_evals_own(text_model, tmp_path):
    """Contexts (5-shot, same few-shot docs, Question/Answer format) and stop strings equal
    what lm-eval's own gsm8k task builds when pointed at the same local files."""
    from lm_eval.api.task import ConfigurableTask

    prepared = lm.collect(
        EvalDef(name="gsm", task="gsm8k", items=4), text_model, tmp_path / "work", None, load_tokenizer(text_model)
    )

    cfg = lm_eval_gsm8k_yaml()
    cfg.pop("tag", None)
    cfg.update(
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={
            "data_files": {"train": str(DATA_DIR / "gsm8k" / "train.jsonl"), "test": str(DATA_DIR / "gsm8k" / "test.jsonl")},
            "cache_dir": str(tmp_path / "hf"),
        },
    )
    ref = ConfigurableTask(config=cfg)
    ref.set_fewshot_seed(seed=1234)  # simple_evaluate's default fewshot_random_seed
    ref.build_all_requests(limit=4)
    assert [i.args[0] for i in ref.instances] == prepared.contexts
    assert all(i.args[1] == prepared.gen_kwargs for i in ref.instances)

    ctx = prepared.contexts[0]
    assert ctx.count("Question: ") == 6 and ctx.count("\nAnswer:") == 6  # 5 shots + the doc
    assert ctx.endswith(f"Question: {JANET}" + ctx.split(JANET, 1)[1]) and ctx.endswith("\nAnswer:")
    assert prepared.gen_kwargs["until"] == cfg["generation_kwargs"]["until"] == ["Question:", "</s>", "<|im_end|>"]

    tok = load_tokenizer(text_model)
    config = json.loads((text_model / "config.json").read_text())
    w = prepared.workload
    assert w["name"] == "eval_gsm" and w["kind"] == "generate" and w["eos_token_id"] == EOS_ID == 1
    assert w["prompts"][0] == encode_text(ctx, tok, config) and w["prompts"][0][0] == BOS_ID
    assert w["stop"] == [tok.encode(s).ids for s in ["Question:", "</s>", "<|im_end|>"]]
    assert w["max_new_tokens"] == 256 and "images" not in w
    assert [i["doc_id"] for i in prepared.items] == [0, 1, 2, 3]
    assert prepared.items[0]["target"].endswith("#### 18")


def test_task_configs_are_derived_from_lm_eval():
    base = lm_eval_gsm8k_yaml()
    for name in tasks.TASKS:
        data = None if name != "geo3k" else "/nonexistent/geo3k.parquet"
        cfg = tasks.lm_eval_config(name, data)
        for key in ("filter_list", "metric_list", "generation_kwargs", "output_type", "repeats"):
            assert cfg[key] == base[key], (name, key)
        if name.startswith("gsm8k"):
            for key in ("doc_to_text", "doc_to_target", "num_fewshot", "fewshot_split"):
                assert cfg[key] == base[key], (name, key)
        else:
            assert cfg["num_fewshot"] == 0 and cfg["doc_to_text"] == "Question: {{problem}}\nAnswer:"


def test_overrides_num_fewshot_and_max_new_tokens(text_model, tmp_path):
    p = lm.collect(
        EvalDef(name="gsm", task="gsm8k", items=2, num_fewshot=0, max_new_tokens=32),
        text_model,
        tmp_path,
        None,
        load_tokenizer(text_model),
    )
    assert p.contexts[0] == f"Question: {json.loads((DATA_DIR / 'gsm8k' / 'test.jsonl').open().readline())['question']}\nAnswer:"
    assert p.workload["max_new_tokens"] == 32
    p5 = lm.collect(EvalDef(name="gsm", task="gsm8k", items=2), text_model, tmp_path, None, load_tokenizer(text_model))
    assert p5.contexts[0].count("Question: ") == 6  # the cached task is not left at 0 shots


# ---------------------------------------------------------------- scoring


def test_score_filters_and_exact_match(text_model, tmp_path):
    tok = load_tokenizer(text_model)
    p = lm.collect(
        EvalDef(name="gsm", task="gsm8k", items=1, num_fewshot=0), text_model, tmp_path, None, load_tokenizer(text_model)
    )

    def one(text_or_ids):
        return lm.score(p, tokens_of([text_or_ids], tok), tok).items[0]

    r = one("She sells 9 eggs for $2 each.\n#### 18")
    assert r["correct"] == {"strict-match": 1, "flexible-extract": 1} and r["answers"]["strict-match"] == "18"
    r = one("The answer is 18.")
    assert r["correct"] == {"strict-match": 0, "flexible-extract": 1}
    r = one("She makes 17 dollars.\n#### 17")
    assert r["correct"] == {"strict-match": 0, "flexible-extract": 0}
    # text after a stop string is cut (lm-eval semantics): the later "#### 7" is never seen
    r = one("The answer is 18.\n\nQuestion: And then?\nAnswer: #### 7")
    assert r["response"] == "The answer is 18.\n\n" and r["correct"] == {"strict-match": 0, "flexible-extract": 1}
    # EOS ends the response; -1 pads are skipped; flexible-extract takes the last number, so
    # anything after EOS leaking in would change the answer
    ids = tok.encode("#### 18").ids + [EOS_ID] + tok.encode(" 99").ids
    res = lm.score(p, tokens_of([ids], tok, pad_to=len(ids) + 5), tok)
    assert res.items[0]["response"] == "#### 18" and res.items[0]["correct"]["flexible-extract"] == 1
    assert res.scores == {"strict-match": 1.0, "flexible-extract": 1.0} and res.n == 1 and res.task == "gsm8k"
    assert res.items[0]["prompt_sha256"] == p.items[0]["prompt_sha256"]
    again = lm.EvalResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert again == res


def test_score_refuses_wrong_row_count(text_model, tmp_path):
    tok = load_tokenizer(text_model)
    p = lm.collect(EvalDef(name="gsm", task="gsm8k", items=2), text_model, tmp_path, None, load_tokenizer(text_model))
    with pytest.raises(ValueError, match="1 generations for 2 prompts"):
        lm.score(p, tokens_of(["#### 1"], tok), tok)


# ---------------------------------------------------------------- gsm8k-arith, item counts, offline


def test_arith_fixture_and_item_count(text_model, tmp_path):
    d = write_arith(tmp_path / "arith")
    e = EvalDef(name="arith", task="gsm8k-arith", data=str(d), pr_items=2)
    assert e.item_count("pr") == 2 and e.item_count("nightly") is None and e.item_count(None) is None
    pr = lm.collect(e, text_model, tmp_path / "w", "pr", load_tokenizer(text_model))
    full = lm.collect(e, text_model, tmp_path / "w", None, load_tokenizer(text_model))
    assert len(pr.items) == 2 and len(full.items) == 3 and len(full.workload["prompts"]) == 3
    assert full.contexts[:2] == pr.contexts  # a slice is a prefix of the full run
    assert full.contexts[0].count("Question: Sam has") == 6
    tok = load_tokenizer(text_model)
    res = lm.score(full, tokens_of(["40 + 5 = 45\n#### 45", "#### 2", "It is 49."], tok), tok)
    assert [i["correct"]["strict-match"] for i in res.items] == [1, 0, 0]
    assert [i["correct"]["flexible-extract"] for i in res.items] == [1, 0, 1]


def test_collect_is_offline(text_model, tmp_path, monkeypatch):
    """No network: every socket connect fails, and the offline switches are set."""

    def refuse(*a, **k):
        raise AssertionError(f"network access attempted: {a}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(lm, "_TASKS", {})  # build the task afresh, under the guard
    p = lm.collect(
        EvalDef(name="arith", task="gsm8k-arith", data=str(write_arith(tmp_path / "a"))),
        text_model,
        tmp_path / "w",
        None,
        load_tokenizer(text_model),
    )
    assert len(p.items) == 3
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_EVALUATE_OFFLINE"):
        assert os.environ[key] == "1"


def test_importing_harness_does_not_import_lm_eval():
    code = "import sys, harness.run.evals.lm, harness.run.evals.tasks; assert 'lm_eval' not in sys.modules and 'datasets' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


# ---------------------------------------------------------------- geo3k


def test_geo3k_parquet_images_and_placeholders(vl_model, tmp_path):
    parquet = write_geo3k(tmp_path / "g" / "test.parquet")
    p = lm.collect(EvalDef(name="geo", task="geo3k", data=str(parquet)), vl_model, tmp_path / "w", None, load_tokenizer(vl_model))
    assert p.contexts == [
        "Question: <image>Find x.\nAnswer:",
        "Question: <image>Find y.\nAnswer:",
        "Question: <image>Find the value of z.\nAnswer:",
    ]
    w = p.workload
    assert w["stop"] == [load_tokenizer(vl_model).encode(s).ids for s in ["Question:", "</s>", "<|im_end|>"]]
    assert len(w["images"]) == 3 and all(Path(x).suffix == ".png" and Path(x).is_file() for x in w["images"])
    assert len(set(w["images"])) == 3 and [i["image"] for i in p.items] == w["images"]
    for ids in w["prompts"]:
        assert ids[0] == BOS_ID and ids.count(511) == 4  # tiny-llama-vl: 4 patches, image_token_id 511
    assert [i["target"] for i in p.items] == ["3", "12", "7.5"]

    tok = load_tokenizer(vl_model)
    res = lm.score(p, tokens_of(["#### 3", "x = 12", "#### 8"], tok), tok)
    assert [i["correct"]["strict-match"] for i in res.items] == [1, 0, 0]
    assert [i["correct"]["flexible-extract"] for i in res.items] == [1, 1, 0]
    # same text, other pixels: same token ids, another prompt hash
    other = write_geo3k(tmp_path / "g2" / "test.parquet", colors=((201, 0, 0), (0, 200, 0), (0, 0, 200)))
    q = lm.collect(EvalDef(name="geo", task="geo3k", data=str(other)), vl_model, tmp_path / "w2", None, load_tokenizer(vl_model))
    assert q.workload["prompts"] == w["prompts"]
    assert q.items[0]["prompt_sha256"] != p.items[0]["prompt_sha256"]
    assert q.items[1]["prompt_sha256"] == p.items[1]["prompt_sha256"]


def test_geo3k_synth_reads_a_given_parquet(vl_model, tmp_path):
    parquet = write_geo3k(tmp_path / "s.parquet")
    p = lm.collect(
        EvalDef(name="geo", task="geo3k-synth", data=str(parquet), pr_items=1), vl_model, tmp_path, "pr", load_tokenizer(vl_model)
    )
    assert len(p.items) == 1 and len(p.workload["images"]) == 1


def test_geo3k_refuses_two_images(vl_model, tmp_path):
    parquet = write_geo3k(tmp_path / "two.parquet", images_per_item=2)
    with pytest.raises(ValueError, match="2 images; the harness takes one image per item"):
        lm.collect(EvalDef(name="geo", task="geo3k", data=str(parquet)), vl_model, tmp_path, None, load_tokenizer(vl_model))


def test_geo3k_missing_or_bad_parquet(vl_model, tmp_path):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(FileNotFoundError, match=r"nope\.parquet does not exist.*`images`.*`problem`.*`answer`"):
        lm.collect(EvalDef(name="geo", task="geo3k", data=str(missing)), vl_model, tmp_path, None, load_tokenizer(vl_model))
    bad = tmp_path / "bad.parquet"
    bad.write_text("not a parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet cannot be read"):
        lm.collect(EvalDef(name="geo", task="geo3k", data=str(bad)), vl_model, tmp_path, None, load_tokenizer(vl_model))
    with pytest.raises(ValueError, match="set `data`"):
        lm.collect(EvalDef(name="geo", task="geo3k"), vl_model, tmp_path, None, load_tokenizer(vl_model))


def test_a_session_with_evals_settles_the_environment_before_its_first_rank(monkeypatch, tmp_path):
    """The ranks inherit the harness's environment, and a rank-pool zygote serves one
    environment: the variables the evals set must be there before the first scenario of the
    run (an eval-less one here) starts, not when the eval scenario is prepared."""
    from harness.inputs.scenarios.loading import load_catalog
    from harness.inputs.scenarios.scenario import find_one
    from harness.run import session
    from harness.run.stages.context import RunContext

    for key in tasks.OFFLINE_ENV:  # (lm-eval's own variable is set once, by its first import in this process)
        monkeypatch.delenv(key, raising=False)
    catalog = load_catalog(None)
    plain, with_evals = find_one(catalog.scenarios, "llama-tiny/tp1-pp1"), find_one(catalog.scenarios, "llama-gsm8k/tp1-pp1")
    seen = []

    def fake_run(scenario, run_dir, opts):
        seen.append((scenario.id, {k: os.environ.get(k) for k in (*tasks.OFFLINE_ENV, "HF_XET_HIGH_PERFORMANCE")}))
        from harness.contract.verdict import Verdict

        return Verdict(scenario.id, "pass", "")

    monkeypatch.setattr(session, "run_scenario", fake_run)
    session.run_session([plain, with_evals], tmp_path, RunContext())
    assert [sid for sid, _ in seen] == ["llama-tiny/tp1-pp1", "llama-gsm8k/tp1-pp1"]
    assert seen[0][1] == seen[1][1] and all(v for v in seen[0][1].values()), seen
    seen.clear()
    for key in tasks.OFFLINE_ENV:
        monkeypatch.delenv(key, raising=False)
    session.run_session([plain], tmp_path, RunContext())  # no evals: nothing is set
    assert not any(seen[0][1][k] for k in tasks.OFFLINE_ENV), seen
