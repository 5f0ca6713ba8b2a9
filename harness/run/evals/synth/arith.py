"""Arithmetic word problems in GSM8K format, small enough for a tiny model to learn.

An item is {"question": str, "answer": str}; the answer shows the working, one line per
step, and ends with "#### N" as GSM8K does, e.g.
  "Sam has 7 apples. He buys 5 more. How many apples does Sam have now?"
  -> "7 + 5 = 12\n#### 12"

Streams: every set is drawn from its own seed (numpy PCG64, stable across numpy
versions). The shipped test set uses TEST_SEED, the few-shot pool (train.jsonl)
TRAIN_SEED, and the training script's stream TRAINING_SEED; the latter two skip every
question of the test set, so no test question is ever seen in training or as a shot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

TEST_SEED = 1001
TRAIN_SEED = 1002  # the few-shot pool shipped as train.jsonl
TRAINING_SEED = 1003  # the training script's stream
MAX_OPERAND = 20

NAMES = [
    ("Sam", "He"),
    ("Mia", "She"),
    ("Tom", "He"),
    ("Ana", "She"),
    ("Ben", "He"),
    ("Lily", "She"),
    ("Max", "He"),
    ("Eva", "She"),
    ("Leo", "He"),
    ("Zoe", "She"),
    ("Jack", "He"),
    ("Emma", "She"),
]
OBJECTS = ["apples", "books", "cards", "coins", "pens", "eggs", "stickers", "marbles", "shells", "cookies"]

# (template, steps): steps is a list of "+"/"-"; operands a, b (and c for two steps)
TEMPLATES = [
    ("{name} has {a} {obj}. {pron} buys {b} more. How many {obj} does {name} have now?", "+"),
    ("There are {a} {obj} in a box. {name} puts in {b} more. How many {obj} are in the box now?", "+"),
    ("{name} found {a} {obj} on Monday and {b} {obj} on Tuesday. How many {obj} did {name} find in total?", "+"),
    ("{name} had {a} {obj} and gave {b} of them to {other}. How many {obj} does {name} have left?", "-"),
    ("{name} has {a} {obj}. {pron} loses {b} of them. How many {obj} are left?", "-"),
    ("{name} has {a} {obj}. {pron} gets {b} more and then gives {c} to {other}. How many {obj} does {name} have now?", "+-"),
]


def make_item(rng: np.random.Generator) -> dict:
    template, ops = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    i, j = rng.choice(len(NAMES), size=2, replace=False)
    (name, pron), (other, _) = NAMES[int(i)], NAMES[int(j)]
    obj = OBJECTS[int(rng.integers(len(OBJECTS)))]
    hi = MAX_OPERAND if len(ops) == 1 else 10
    a, b = (int(x) for x in rng.integers(1, hi + 1, size=2))
    if ops == "-" and b > a:
        a, b = b, a
    steps, value = [], a
    c = None
    for k, op in enumerate(ops):
        if k == 0:
            operand = b
        else:
            operand = c = int(rng.integers(1, value + 1))  # never below zero
        new = value + operand if op == "+" else value - operand
        steps.append(f"{value} {op} {operand} = {new}")
        value = new
    question = template.format(name=name, pron=pron, other=other, obj=obj, a=a, b=b, c=c)
    return {"question": question, "answer": "\n".join(steps) + f"\n#### {value}"}


def stream(seed: int, exclude: set[str] | frozenset = frozenset()) -> Iterator[dict]:
    """An endless stream of items (duplicate questions are allowed; excluded ones skipped)."""
    rng = np.random.default_rng(seed)
    while True:
        item = make_item(rng)
        if item["question"] not in exclude:
            yield item


def unique_set(seed: int, n: int, exclude: set[str] | frozenset = frozenset()) -> list[dict]:
    """n items with distinct questions, none in `exclude`."""
    seen, items = set(exclude), []
    for item in stream(seed):
        if item["question"] not in seen:
            seen.add(item["question"])
            items.append(item)
            if len(items) == n:
                return items
    raise AssertionError("unreachable")


def heldout_set(n: int = 500) -> list[dict]:
    return unique_set(TEST_SEED, n)


def fewshot_set(n: int = 300, test: list[dict] | None = None) -> list[dict]:
    excluded = {item["question"] for item in (test if test is not None else heldout_set())}
    return unique_set(TRAIN_SEED, n, excluded)


def write_jsonl(items: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_sets(out: Path, n_test: int = 500, n_train: int = 300) -> None:
    test = heldout_set(n_test)
    write_jsonl(test, Path(out) / "test.jsonl")
    write_jsonl(fewshot_set(n_train, test), Path(out) / "train.jsonl")
