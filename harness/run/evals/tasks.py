"""The harness's eval tasks: lm-eval task configs reading local data, offline.

Each task is a YAML in harness/run/evals/tasks/ that names the lm-eval task YAML it extends
(`extends`, a path under lm_eval/tasks/), where its data comes from (`data`) and the
lm-eval config keys it changes (`config`). The lm-eval config is read from the installed
lm-eval at load time, so prompt format, few-shot settings, stop strings, filters and
metric cannot drift from lm-eval's own task; only the data source is replaced (by a
`custom_dataset` that reads local files, so nothing is ever downloaded).

lm-eval and datasets are imported inside functions: importing harness stays light.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from harness.contract.roots import DATA_DIR

TASK_DIR = Path(__file__).resolve().parent / "tasks"
TASKS: dict[str, Path] = {p.stem: p for p in sorted(TASK_DIR.glob("*.yaml"))}
LOADERS = ("jsonl", "geo3k-parquet")
GEO3K_COLUMNS = ("images", "problem", "answer")
GEO3K_LAYOUT = (
    "a Geo3K parquet (the hiyouga/geometry3k layout) has the columns `images` (a list "
    'of images, HF Sequence(Image())), `problem` (text with an "<image>" mark) and '
    "`answer` (a string)"
)
OFFLINE_ENV = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_EVALUATE_OFFLINE")


def offline() -> None:
    """Tell datasets / huggingface_hub / lm-eval never to reach the network. Called before
    any of them is imported by the harness (they read these at import time)."""
    for key in OFFLINE_ENV:
        os.environ[key] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def settle_environment() -> None:
    """What the evals put in this process's environment, put there before a run's first
    rank starts: the offline switches, and what lm-eval's import sets (HF_XET_HIGH_PERFORMANCE).
    Ranks inherit the harness's environment, and a rank-pool zygote serves only ranks of the
    environment it was started in: a change halfway through a run started a second zygote
    (which re-imported vLLM: docs/BENCHMARKS.md has the cost)."""
    offline()
    import lm_eval  # noqa: F401 - for the variables its import sets


def task_definition(name: str) -> dict:
    """The task's definition as its YAML (harness/run/evals/tasks/<name>.yaml) gives it,
    its data loader checked."""
    import yaml

    if name not in TASKS:
        raise KeyError(f"unknown eval task '{name}' (known: {', '.join(TASKS)}; harness/run/evals/tasks/)")
    s = yaml.safe_load(TASKS[name].read_text())
    if s.get("data", {}).get("loader") not in LOADERS:
        raise ValueError(f"{TASKS[name]}: data.loader must be one of {LOADERS}")
    return s


def lm_eval_base_yaml(name: str) -> Path:
    """The lm-eval task YAML a harness task extends (in the installed lm-eval)."""
    import lm_eval.tasks

    path = Path(lm_eval.tasks.__file__).resolve().parent / task_definition(name)["extends"]
    if not path.is_file():
        raise FileNotFoundError(f"eval task '{name}' extends {path}, which the installed lm-eval lacks")
    return path


def data_files(name: str, data: str | None = None) -> dict[str, Path]:
    """The local files of each split. `data` (EvalDef.data) replaces the shipped data: a
    directory holding <split>.jsonl / <split>.parquet, or a file that becomes the test split
    (other splits stay the shipped ones)."""
    s = task_definition(name)
    ext = ".jsonl" if s["data"]["loader"] == "jsonl" else ".parquet"
    files = {split: (DATA_DIR / rel if rel else None) for split, rel in s["data"]["splits"].items()}
    if data is not None:
        d = Path(data).expanduser()
        if d.is_dir():
            files = {split: d / f"{split}{ext}" for split in files}
        else:
            files["test"] = d
    if files.get("test") is None:
        what = GEO3K_LAYOUT if s["data"]["loader"] == "geo3k-parquet" else "a JSONL test split"
        raise ValueError(
            f"eval task '{name}' reads a file the scenario names: set `data` in the eval entry to the path of {what}"
        )
    return {split: p.resolve() for split, p in files.items() if p is not None}


def lm_eval_config(name: str, data: str | None = None) -> dict:
    """lm-eval's config of the base task with the local data source and this task's changes:
    ready for lm_eval.api.task.ConfigurableTask(config=...)."""
    offline()
    from lm_eval.tasks._yaml_loader import load_yaml

    s = task_definition(name)
    files = data_files(name, data)
    cfg = dict(load_yaml(lm_eval_base_yaml(name), resolve_func=True))
    # structure, not task config (as lm-eval's factory does)
    for key in ("tag", "group", "task_list"):
        cfg.pop(key, None)
    cfg.update(s.get("config") or {})
    loader = _load_jsonl if s["data"]["loader"] == "jsonl" else _load_geo3k
    cfg.update(
        task=name,
        dataset_path=str(files["test"]),
        dataset_name=None,
        dataset_kwargs=None,
        custom_dataset=functools.partial(loader, files),
    )
    cfg["metadata"] = {**(cfg.get("metadata") or {}), "harness_task": name, "lm_eval_base": str(lm_eval_base_yaml(name))}
    return cfg


def _load_jsonl(files: dict[str, Path], **_metadata):
    import datasets

    splits = {}
    for split, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(
                f"eval data {path} ({split} split) does not exist: a JSONL file, one "
                '{"question": ..., "answer": "... #### N"} per line'
            )
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        missing = [i for i, r in enumerate(rows) if not {"question", "answer"} <= set(r)]
        if not rows or missing:
            raise ValueError(
                f"eval data {path}: every line needs the fields question and answer "
                f"({'no lines' if not rows else f'line {missing[0] + 1} lacks one'})"
            )
        splits[split] = datasets.Dataset.from_list([{"question": r["question"], "answer": r["answer"]} for r in rows])
    return datasets.DatasetDict(splits)


def _load_geo3k(files: dict[str, Path], **_metadata):
    """A Geo3K parquet, read in memory (no datasets cache, no hub)."""
    import datasets
    import pyarrow.parquet as pq

    splits = {}
    for split, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(f"Geo3K parquet {path} does not exist; {GEO3K_LAYOUT}")
        try:
            table = pq.read_table(path)
        except Exception as e:
            raise ValueError(f"Geo3K parquet {path} cannot be read ({type(e).__name__}: {e}); {GEO3K_LAYOUT}") from e
        missing = [c for c in GEO3K_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(
                f"Geo3K parquet {path} lacks the column(s) {', '.join(missing)} "
                f"(it has {', '.join(table.column_names)}); {GEO3K_LAYOUT}"
            )
        ds = datasets.Dataset(datasets.table.InMemoryTable(table.select(list(GEO3K_COLUMNS))))
        if not _is_image_list(ds.features["images"]):
            # a parquet without HF metadata: list<struct<bytes, path>>
            try:
                ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
            except Exception as e:
                raise ValueError(
                    f"Geo3K parquet {path}: column `images` is {ds.features['images']}, not a list of images; {GEO3K_LAYOUT}"
                ) from e
        splits[split] = ds
    return datasets.DatasetDict(splits)


def _is_image_list(feature) -> bool:
    import datasets

    inner = getattr(feature, "feature", None)
    return isinstance(inner, datasets.Image)
