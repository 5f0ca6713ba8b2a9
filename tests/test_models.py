"""A user's model: a local checkpoint, a hub id from an offline cache, a tiny random
checkpoint of any transformers architecture (harness/inputs/models). Unit tests of the
sources and their errors, then whole runs through the CLI on real ranks."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.inputs import models
from harness.inputs.models import ArchModel, HubModel, ModelError, PathModel
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.schema import ScenarioError
from tests.kit import ROOT, harness_cli, verdict_of, verdicts
from tests.kit.present import present


@pytest.fixture(scope="module")
def tiny_llama() -> models.ResolvedModel:
    """A tiny random LlamaForCausalLM built by this interpreter (cached across runs)."""
    return models.resolve(ArchModel(arch="LlamaForCausalLM", seed=0), sys.executable)


@pytest.mark.e2e
def test_tiny_checkpoint_is_small_complete_and_keyed_by_what_made_it(tiny_llama):
    cfg = json.loads((tiny_llama.directory / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]) == (2, 128, 4, 512)
    assert cfg["head_dim"] == 32 and cfg["num_key_value_heads"] == 2
    assert models.checkpoint_problem(tiny_llama.directory) is None
    assert tiny_llama.label == "arch:LlamaForCausalLM seed=0"
    other_seed = models.tiny_key(ArchModel(arch="LlamaForCausalLM", seed=1), sys.executable)
    overridden = models.tiny_key(ArchModel(arch="LlamaForCausalLM", overrides={"num_hidden_layers": 4}), sys.executable)
    same = models.tiny_key(ArchModel(arch="LlamaForCausalLM", seed=0), sys.executable)
    assert same in tiny_llama.directory.name and len({same, other_seed, overridden}) == 3


@pytest.mark.e2e
def test_a_built_tiny_checkpoint_is_reused_not_rebuilt(tiny_llama, monkeypatch):
    monkeypatch.setattr(models, "_run_builder", lambda *a: pytest.fail("rebuilt a cached tiny checkpoint"))
    again = models.resolve(ArchModel(arch="LlamaForCausalLM", seed=0), sys.executable)
    assert again == tiny_llama


@pytest.mark.e2e
def test_tiny_build_is_deterministic(tmp_path):
    """Two builds in two processes give the same bytes: a golden can be remade. (Side by
    side: each is mostly its interpreter importing transformers, on a core of its own.)"""
    outs = [tmp_path / f"b{n}" for n in range(2)]
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(f"{out}.log", "w")) for out in outs]
        builds = [
            subprocess.Popen(
                models.builder_command(ArchModel(arch="Qwen3ForCausalLM", seed=3), sys.executable, out),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            for out, log in zip(outs, logs)
        ]
        codes = [build.wait() for build in builds]
    for code, out in zip(codes, outs):
        assert code == 0, Path(f"{out}.log").read_text()
    digests = [hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest() for out in outs]
    assert digests[0] == digests[1]


@pytest.mark.e2e
def test_an_unknown_architecture_is_refused_with_close_names():
    with pytest.raises(ModelError, match=r"unknown architecture 'LlamaForCasualLM'.*did you mean LlamaForCausalLM"):
        models.resolve(ArchModel(arch="LlamaForCasualLM"), sys.executable)


@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"no_such_field": 1}, "override 'no_such_field' is not a field of LlamaConfig"),
        ({"num_attention_heads": 3}, "LlamaForCausalLM rejects its config .*not a multiple of the number of attention heads"),
    ],
)
@pytest.mark.e2e
def test_overrides_the_config_rejects_are_refused(overrides, said):
    with pytest.raises(ModelError, match=said):
        models.resolve(ArchModel(arch="LlamaForCausalLM", overrides=overrides), sys.executable)


@pytest.mark.e2e
def test_extra_config_keys_reach_config_json_and_declared_fields_are_refused():
    ref = ArchModel(arch="LlamaForCausalLM", extra_config={"topk_method": "noaux_tc"})
    config = json.loads((models.resolve(ref, sys.executable).directory / "config.json").read_text())
    assert config["topk_method"] == "noaux_tc" and config["model_type"] == "llama"
    assert "extra_config" in ref.label and ref.label != ArchModel(arch="LlamaForCausalLM").label
    with pytest.raises(ModelError, match=r"extra_config \['head_dim'\] are fields of LlamaConfig: set them under `overrides:`"):
        models.resolve(ArchModel(arch="LlamaForCausalLM", extra_config={"head_dim": 32}), sys.executable)


@pytest.mark.e2e
def test_a_directory_that_is_not_a_checkpoint_is_refused(tmp_path, tiny_llama):
    with pytest.raises(ModelError, match="no such directory"):
        models.resolve(PathModel(path=str(tmp_path / "missing")), sys.executable)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="is not a checkpoint: no config.json"):
        models.resolve(PathModel(path="empty"), sys.executable, base_dir=tmp_path)
    partial = tmp_path / "partial"
    shutil.copytree(tiny_llama.directory, partial)
    (partial / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="no model.safetensors or model.safetensors.index.json"):
        models.resolve(PathModel(path=str(partial)), sys.executable)


@pytest.mark.e2e
def test_a_local_checkpoint_is_identified_by_content_and_hashed_once(tmp_path, tiny_llama, monkeypatch):
    copy = tmp_path / "ckpt"
    shutil.copytree(tiny_llama.directory, copy)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    first = models.resolve(PathModel(path=str(copy)), sys.executable)
    assert first.label == f"path:{copy}" and first.directory == copy
    reads = []

    def digest(p):
        reads.append(p)
        return "x"

    monkeypatch.setattr(models.identity, "_file_digest", digest)
    assert models.resolve(PathModel(path=str(copy)), sys.executable).sha256 == first.sha256
    assert reads == []  # the digest came from the cache
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    monkeypatch.undo()
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert models.resolve(PathModel(path=str(copy)), sys.executable).sha256 != first.sha256


@pytest.mark.e2e
def test_a_hub_model_missing_from_an_offline_cache_says_what_to_do(tmp_path):
    code = (
        "from harness.inputs import models\n"
        "try:\n"
        "    models.resolve(models.HubModel(hub='acme/tiny', revision='0' * 40), 'python')\n"
        "except models.ModelError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT).stdout
    assert (
        "hub model 'acme/tiny' at revision '0000000000000000000000000000000000000000' is not in the huggingface_hub cache" in said
    )
    assert "offline" in said and "hf download acme/tiny --revision" in said


@pytest.mark.parametrize(
    "model, said",
    [
        ({"hub": "acme/tiny"}, "revision"),
        ({"arch": "Llama ForCausalLM"}, "arch"),
        ({"path": "x", "seed": 1}, "seed"),
        (7, "model"),
    ],
)
def test_a_malformed_model_entry_is_an_error_of_the_file(tmp_path, model, said):
    path = tmp_path / "s.yaml"
    path.write_text(
        json.dumps(
            {
                "suite": "s",
                "model": model,
                "golden": {"tp": 1},
                "matrix": {"tp": [1]},
                "workloads": [{"name": "logits", "kind": "logprobs"}],
            }
        )
    )
    with pytest.raises(ScenarioError, match=said):
        load_suite(path)


def test_model_forms_load_from_a_scenario_file(tmp_path):
    path = tmp_path / "s.yaml"
    base = {"suite": "s", "golden": {"tp": 1}, "matrix": {"tp": [1]}, "workloads": [{"name": "logits", "kind": "logprobs"}]}
    for model, kind in [
        ("tiny-llama", str),
        ({"path": "ckpt"}, PathModel),
        ({"hub": "a/b", "revision": "r"}, HubModel),
        ({"arch": "Qwen3ForCausalLM", "seed": 2, "overrides": {"num_hidden_layers": 4}}, ArchModel),
    ]:
        path.write_text(json.dumps({**base, "model": model}))
        assert isinstance(load_suite(path).model, kind)


# ---------------------------------------------------------------------------------
# whole runs: golden, then the matrix, through the CLI


SUITE = """
suite: {suite}
engine: {engine}
model: {model}
timeout_s: 300
workloads:
  - {{name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 24, top_k: 5}}
  - {{name: greedy, kind: greedy, num_prompts: 2, max_prompt_tokens: 16, max_new_tokens: 4, top_k: 5}}
golden: {{tp: 1, pp: 1}}
matrix: {{tp: {tps}, pp: [1]}}
"""


def run_suite(tmp_path: Path, suite: str, model: str, env: dict, engine: str = "reference", tps=(1, 2)) -> dict:
    """`harness golden` then `harness run` of a one-file suite; the verdicts by id."""
    (tmp_path / "scenarios").mkdir(exist_ok=True)
    (tmp_path / "scenarios" / f"{suite}.yaml").write_text(SUITE.format(suite=suite, engine=engine, model=model, tps=list(tps)))
    env = {"HARNESS_GOLDEN_DIR": str(tmp_path / "golden"), **env}
    made = harness_cli("golden", suite, "--work-dir", str(tmp_path / "work"), scenarios=tmp_path / "scenarios", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    ran = harness_cli(
        "run", suite, "--report-dir", str(tmp_path / "reports"), "--run-id", "r", scenarios=tmp_path / "scenarios", env=env
    )
    found = verdicts(tmp_path / "reports" / "r")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return found


@pytest.mark.e2e
@pytest.mark.nightly_only  # 16 s; make test's representative is the arch sweep below (tiny archs under tp2, pp2, tp2-pp2,
# each against its own golden, and the manifest's model named as here)
def test_a_tiny_random_architecture_runs_under_tp(tmp_path):
    verdicts = run_suite(tmp_path, "tiny-arch", "{arch: LlamaForCausalLM, seed: 0}", {})
    assert {k: v["verdict"] for k, v in verdicts.items()} == {"tiny-arch/tp1-pp1": "pass", "tiny-arch/tp2-pp1": "pass"}
    manifest = json.loads((tmp_path / "golden" / "tiny-arch" / "manifest.json").read_text())
    assert manifest["model"] == "arch:LlamaForCausalLM seed=0" and len(manifest["model_sha256"]) == 64


@pytest.mark.e2e
def test_a_non_llama_architecture_runs_on_the_hf_engine(tmp_path):
    verdicts = run_suite(tmp_path, "tiny-qwen3", "{arch: Qwen3ForCausalLM, seed: 1}", {}, engine="hf", tps=(1,))
    assert [v["verdict"] for v in verdicts.values()] == ["pass"]


@pytest.mark.e2e
def test_a_local_checkpoint_runs_and_a_golden_of_other_weights_is_refused(tmp_path, tiny_llama):
    ckpt = tmp_path / "my-llama"
    shutil.copytree(tiny_llama.directory, ckpt)
    # tp1: ranks reading a resolved path under tp2 is the hub test's (its model is a path too)
    verdicts = run_suite(tmp_path, "local", f"{{path: {ckpt}}}", {}, tps=(1,))
    assert {v["verdict"] for v in verdicts.values()} == {"pass"}
    # other weights in the same place: the stored golden no longer applies
    other = models.resolve(ArchModel(arch="LlamaForCausalLM", seed=5), sys.executable)
    shutil.copy(other.directory / "model.safetensors", ckpt / "model.safetensors")
    ran = harness_cli(
        "run",
        "local/tp1-pp1",
        "--report-dir",
        str(tmp_path / "reports"),
        "--run-id",
        "stale",
        scenarios=tmp_path / "scenarios",
        env={"HARNESS_GOLDEN_DIR": str(tmp_path / "golden")},
    )
    verdict = verdict_of(tmp_path / "reports" / "stale", "local/tp1-pp1")
    assert verdict["verdict"] == "error" and "model_sha256" in json.dumps(verdict), verdict
    assert ran.returncode != 0


def populate_hub_cache(cache: Path, repo: str, revision: str, files: Path) -> None:
    """huggingface_hub's cache layout, as `hf download` leaves it: blobs named by content
    hash, a snapshot of links to them, a ref. (No network here to download for real.)"""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / revision
    (repo_dir / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in files.iterdir():
        blob = repo_dir / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)


@pytest.mark.e2e
def test_a_hub_model_runs_from_an_offline_cache(tmp_path, tiny_llama):
    revision = "1" * 40
    populate_hub_cache(tmp_path / "hub", "acme/tiny-llama", revision, tiny_llama.directory)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    verdicts = run_suite(tmp_path, "hub", f"{{hub: acme/tiny-llama, revision: '{revision}'}}", env, tps=(2,))
    assert [v["verdict"] for v in verdicts.values()] == ["pass"]
    manifest = json.loads((tmp_path / "golden" / "hub" / "manifest.json").read_text())
    assert manifest["model"] == f"hub:acme/tiny-llama@{revision}"


# ---------------------------------------------------------------------------------
# the arch axis: one suite, one model (and one golden) per architecture


def arch_suite(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "archs.yaml"
    path.write_text(
        json.dumps(
            {
                "suite": "archs",
                "golden": {"tp": 1},
                "matrix": {"tp": [1, 2]},
                "workloads": [{"name": "logits", "kind": "logprobs"}],
                **fields,
            }
        )
    )
    return path


def test_the_arch_axis_expands_to_one_model_and_golden_per_arch(tmp_path):
    from harness.inputs.scenarios.scenario import expand

    path = arch_suite(tmp_path, archs={"llama": "LlamaForCausalLM", "qwen3": {"arch": "Qwen3ForCausalLM", "seed": 1}})
    scenarios = {s.id: s for s in expand(load_suite(path), path)}
    assert list(scenarios) == ["archs/arch-llama-tp1", "archs/arch-llama-tp2", "archs/arch-qwen3-tp1", "archs/arch-qwen3-tp2"]
    qwen = scenarios["archs/arch-qwen3-tp2"]
    assert qwen.model == ArchModel(arch="Qwen3ForCausalLM", seed=1)
    assert qwen.golden_key == "archs/qwen3"
    assert qwen.engine_settings == {"tp": 2} and qwen.settings == {"arch": "qwen3", "tp": 2}
    assert scenarios["archs/arch-llama-tp1"].is_golden_setting


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"model": "tiny-llama", "archs": {"llama": "LlamaForCausalLM"}}, "either model: or archs:"),
        ({"model": "tiny-llama", "matrix": {"arch": ["llama"], "tp": [1]}}, "matrix axis arch needs archs:"),
        ({"archs": {"llama": "LlamaForCausalLM"}, "matrix": {"arch": ["llama", "qwen"], "tp": [1]}}, r"names \['qwen'\]"),
        ({"archs": {"Llama": "LlamaForCausalLM"}}, "must use"),
        ({}, "model: is missing"),
    ],
)
def test_arch_axis_mistakes_are_errors_of_the_file(tmp_path, fields, said):
    with pytest.raises(ScenarioError, match=said):
        load_suite(arch_suite(tmp_path, **fields))


ARCH_SWEEP = """
suite: sweep
engine: reference
archs:
  llama: LlamaForCausalLM
  llama-deep: {arch: LlamaForCausalLM, seed: 2, overrides: {num_hidden_layers: 4}}
  qwen3: Qwen3ForCausalLM
timeout_s: 300
workloads:
  - {name: logits, kind: logprobs, num_prompts: 2, max_prompt_tokens: 24, top_k: 5}
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1, 2]}
exclude: [{tp: 1, pp: 1}]
"""


@pytest.mark.e2e
def test_an_arch_sweep_runs_each_arch_against_its_own_golden(tmp_path):
    """Two Llama variants pass under tp2, pp2, tp2-pp2 against their own goldens; the
    reference engine does not serve Qwen3: its golden is skipped, its scenarios are
    `unsupported` with the reason, and the run still succeeds."""
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "sweep.yaml").write_text(ARCH_SWEEP)
    env: dict[str, str | None] = {"HARNESS_GOLDEN_DIR": str(tmp_path / "golden")}
    made = harness_cli("golden", "sweep", "--work-dir", str(tmp_path / "work"), scenarios=tmp_path / "scenarios", env=env)
    assert made.returncode == 0, made.stderr
    assert "golden sweep/qwen3: skipped: engine 'reference' cannot run the golden setting" in made.stdout
    manifests = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "golden" / "sweep").glob("*/manifest.json")}
    assert sorted(manifests) == ["llama", "llama-deep"]
    assert manifests["llama"]["model_sha256"] != manifests["llama-deep"]["model_sha256"]
    assert all(len(m["model_sha256"]) == 64 and m["model"].startswith("arch:LlamaForCausalLM seed=") for m in manifests.values())
    ran = harness_cli(
        "run", "sweep", "--report-dir", str(tmp_path / "reports"), "--run-id", "r", scenarios=tmp_path / "scenarios", env=env
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = verdicts(tmp_path / "reports" / "r")
    assert {k: v["verdict"] for k, v in found.items() if "qwen3" not in k} == {
        f"sweep/arch-{a}-{s}": "pass" for a in ("llama", "llama-deep") for s in ("tp1-pp2", "tp2-pp1", "tp2-pp2")
    }
    qwen = [v for k, v in found.items() if "qwen3" in k]
    assert len(qwen) == 3 and all(v["verdict"] == "unsupported" and "model_type='qwen3'" in v["reason"] for v in qwen)


@pytest.mark.parametrize("arch", ["DeepseekV32ForCausalLM", "Cohere2MoeForCausalLM", "FalconForCausalLM", "GPT2LMHeadModel"])
@pytest.mark.slow
def test_shrinking_fits_per_layer_lists_and_skips_derived_fields(arch):
    """Per-layer lists follow the layer count (keeping each kind of layer); a read-only
    derived field (Falcon's head_dim) is left to follow the others."""
    from harness.inputs.models import tiny

    model = tiny.build_model(arch, seed=0, overrides={})
    config = model.config
    layers = config.num_hidden_layers
    assert layers <= 2 and config.hidden_size == 128
    for field, values in vars(config).items():
        if field.endswith("layer_types") and isinstance(values, list):
            assert len(values) == layers, field
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_the_report_reads_the_arch_axis_like_any_other():
    """Heat map rows are the archs, and a failure confined to one arch under pp2 is
    attributed to `arch=..., pp=2`."""
    from harness.contract.verdict import Verdict
    from harness.run.report import plots
    from harness.run.report.axes import explaining_settings

    verdicts = []
    for arch in ("llama", "falcon", "qwen3"):
        for tp, pp in ((1, 1), (2, 1), (1, 2)):
            bad = arch == "falcon" and pp == 2
            verdicts.append(
                Verdict(
                    f"s/arch-{arch}-tp{tp}-pp{pp}", "fail" if bad else "pass", "x", settings={"arch": arch, "tp": tp, "pp": pp}
                )
            )
    assert "`arch=falcon, pp=2`" in present(explaining_settings(verdicts))
    assert plots._grid_axes(verdicts)[0] == "arch"
    assert present(plots.heatmap(verdicts, set())).startswith("data:image/png;base64,")


def test_a_workload_the_model_cannot_take_stops_its_golden_with_one_line(tmp_path):
    """A scenario file's mistake (audio clips for a text-only checkpoint, which has no chat
    template to place them) is a message naming the workload, not a harness traceback;
    the other goldens of the run are still made."""
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "clips.yaml").write_text(
        "suite: clips\nengine: reference\nmodel: tiny-llama\n"
        "workloads:\n  - {name: heard, kind: logprobs, num_prompts: 2, max_prompt_tokens: 24, top_k: 5, audios: [tone-500ms, null]}\n"
        "golden: {tp: 1}\nmatrix: {tp: [1]}\n"
    )
    made = harness_cli(
        "golden",
        "--work-dir",
        str(tmp_path / "work"),
        scenarios=tmp_path / "scenarios",
        env={"HARNESS_GOLDEN_DIR": str(tmp_path / "golden")},
    )
    assert made.returncode == 1, made.stdout + made.stderr
    assert "Traceback" not in made.stderr, made.stderr
    assert "harness: golden clips failed: workload 'heard': videos and audios need a model with a chat template" in made.stderr


def test_scenarios_resolving_one_checkpoint_at_once_both_record_its_identity(tmp_path, monkeypatch):
    """`harness run --jobs 2` resolves a model in two threads of one process at once (two
    settings of one arch). Each writes the digest's cache file through a temporary file of
    its own: with one per process, the second rename found the first's gone
    (FileNotFoundError: an `error` verdict in the multimodal nightly of 2026-11-26)."""
    import threading

    from harness.inputs.models import identity

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    both_ready = threading.Barrier(2, timeout=10)
    real_replace = os.replace

    def replace_together(src, dst):  # both threads hold their temporary file before either renames
        both_ready.wait()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_together)
    results, errors = [], []

    def resolve():
        try:
            results.append(identity.checkpoint_digest(checkpoint))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 2 and results[0] == results[1]
