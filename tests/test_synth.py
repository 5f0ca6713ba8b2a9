"""The generated eval sets: deterministic, correct, and disjoint from training."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from harness.inputs.zoo import DATA_DIR
from harness.run.evals.synth import arith, geo3k
from tests.kit.present import present


def _value(answer: str) -> int:
    return int(answer.split("#### ")[-1])


def test_arith_deterministic_for_a_seed():
    assert arith.unique_set(7, 50) == arith.unique_set(7, 50)
    assert arith.unique_set(7, 50) != arith.unique_set(8, 50)


def test_arith_answers_are_correct():
    for item in arith.unique_set(11, 400):
        lines = item["answer"].split("\n")
        assert re.fullmatch(r"#### \d+", lines[-1])
        value = None
        for line in lines[:-1]:
            a, op, b, eq, c = line.split()
            assert eq == "=" and int(c) == (int(a) + int(b) if op == "+" else int(a) - int(b))
            assert value is None or int(a) == value  # each step continues from the last
            value = int(c)
        assert value == _value(item["answer"]) >= 0
        numbers = [int(n) for n in re.findall(r"\d+", item["question"])]
        assert [int(n) for n in lines[0].split()[0:3:2]] == numbers[:2]


def test_shipped_arith_sets_match_generator_and_are_disjoint():
    test = arith.read_jsonl(DATA_DIR / "arith" / "test.jsonl")
    train = arith.read_jsonl(DATA_DIR / "arith" / "train.jsonl")
    assert test == arith.heldout_set(len(test))
    assert train == arith.fewshot_set(len(train), test)
    assert len({it["question"] for it in test}) == len(test) == 500
    test_q = {it["question"] for it in test}
    assert not test_q & {it["question"] for it in train}
    # the training script's stream never yields a test question
    stream = arith.stream(arith.TRAINING_SEED, test_q)
    assert not test_q & {next(stream)["question"] for _ in range(5000)}
    raw = arith.stream(arith.TRAINING_SEED)  # without the exclusion some would appear
    assert test_q & {next(raw)["question"] for _ in range(20000)}


def test_geo_deterministic_and_answers_follow_labels():
    a, b = geo3k.heldout_set(30, seed=5), geo3k.heldout_set(30, seed=5)
    assert [(x["png"], x["problem"], x["answer"]) for x in a] == [(y["png"], y["problem"], y["answer"]) for y in b]
    for item in geo3k.heldout_set(200, seed=6):
        mult = geo3k.KINDS[item["kind"]][1]
        assert item["answer"] == str(item["label"] * mult)
        assert item["problem"].startswith("<image>")
        assert present(re.search(r"#### (\d+)$", item["target"])).group(1) == item["answer"]


def test_geo_label_is_drawn_and_digits_differ():
    """The label's cells hold the seven-segment digits; different digits, different pixels."""
    cells: dict = {}
    for item in geo3k.heldout_set(300, seed=7):
        rgb = item["pixels"]
        digits = str(item["label"])
        black = np.argwhere((rgb == 0).all(-1))
        assert len(black), "label missing"
        row, col = black[:, 0].min() // geo3k.PATCH, black[:, 1].min() // geo3k.PATCH
        for k, d in enumerate(digits):
            y, x = row * geo3k.PATCH, (col + k) * geo3k.PATCH
            cell = (rgb[y : y + geo3k.PATCH, x : x + geo3k.PATCH] == 0).all(-1)
            cells.setdefault(d, set()).add(cell.tobytes())
    assert set(cells) == set("0123456789")
    assert all(len(v) == 1 for v in cells.values())  # a digit always looks the same
    assert len({next(iter(v)) for v in cells.values()}) == 10  # and unlike every other digit


def test_shipped_geo_parquet_decodes_and_is_disjoint_from_training():
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    ds = datasets.Dataset.from_parquet(str(DATA_DIR / "geo3k-synth" / "test.parquet"))
    assert ds.column_names == ["images", "problem", "answer"] and len(ds) == 300
    expected = geo3k.heldout_set(300)
    raw = ds.with_format("arrow")[:5]["images"].to_pylist()
    for k, item in enumerate(expected[:5]):
        png = raw[k][0]["bytes"]
        assert png == item["png"]
        with Image.open(io.BytesIO(png)) as img:
            assert img.size == (geo3k.IMAGE_SIZE, geo3k.IMAGE_SIZE)
            assert (np.asarray(img.convert("RGB")) == item["pixels"]).all()
    assert ds["answer"] == [it["answer"] for it in expected]
    assert ds["problem"] == [it["problem"] for it in expected]
    keys = {geo3k.item_key(it) for it in expected}
    stream = geo3k.stream(geo3k.TRAINING_SEED, keys, png=False)
    assert not keys & {geo3k.item_key(next(stream)) for _ in range(3000)}


def test_cli_writes_sets(tmp_path):
    from harness.run.evals.synth.__main__ import main

    main(["arith", "--out", str(tmp_path / "a"), "--n", "20", "--n-train", "10"])
    assert len(arith.read_jsonl(tmp_path / "a" / "test.jsonl")) == 20
    assert len(arith.read_jsonl(tmp_path / "a" / "train.jsonl")) == 10
    pytest.importorskip("datasets")
    main(["geo3k", "--out", str(tmp_path / "g"), "--n", "12", "--seed", "3"])
    assert (tmp_path / "g" / "test.parquet").stat().st_size > 0
