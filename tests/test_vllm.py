"""Real vLLM engine starts through the harness CLI: a worker crash is reported with the
worker and its root-cause exception, and an axis value the installed vLLM lacks is
`unsupported` with vLLM's own reason. Slow (vLLM engine starts): `make test-vllm`
sets HARNESS_TEST_VLLM=1; without vLLM installed these tests then fail, by design."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.engines.vllm.faults import ZEROED_MARK
from tests.kit import ROOT, harness_cli, survivors, verdict_of
from tests.kit.present import present

pytestmark = pytest.mark.skipif(not os.environ.get("HARNESS_TEST_VLLM"), reason="real vLLM engine starts: run `make test-vllm`")


def left_in_shared_memory(run_dir: Path, sid: str) -> list[str]:
    """The files vLLM's CPU workers of this scenario left in /dev/shm (named after the
    rendezvous file its workers log, vllm_dist_<hex>)."""
    import re

    from harness.contract.rundir import scenario_dir

    log = (scenario_dir(run_dir, sid) / "logs" / "rank0.log").read_text()
    idents = set(re.findall(r"vllm_dist_[0-9a-f]{32}", log))
    assert idents, "no vLLM rendezvous named in the log"
    return sorted(str(p) for ident in idents for p in Path("/dev/shm").glob(ident + "-*"))


def run(tmp_path: Path, scenarios: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    result = harness_cli(
        "run",
        "--report-dir",
        str(tmp_path),
        "--run-id",
        "r",
        *args,
        scenarios=scenarios,
        timeout=900,
        what=f"harness run {' '.join(args[:3])}",
    )
    return result, tmp_path / "r"


def suite_with_fault(tmp_path: Path, suite: str, fault: str) -> Path:
    """A scenarios folder holding the built-in `suite` with `fault` switched on in its workers."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir(exist_ok=True)
    text = (ROOT / "scenarios" / f"{suite}.yaml").read_text()
    (scenarios / f"{suite}.yaml").write_text(text + f"faults: [{fault}]\n")
    return scenarios


def test_worker_crash_names_the_pp1_worker_and_its_root_cause(tmp_path):
    """A KeyError raised inside the model's forward on the PP rank 1 worker only (the
    pp-drop-residual fault, loaded in vLLM's workers by harness/engines/vllm/faults.py).
    With compile: eager PP crashes earlier on this vLLM for a reason of its own (docs/VLLM.md)."""
    scenarios = suite_with_fault(tmp_path, "vllm-llama", "pp-drop-residual@1")
    result, run_dir = run(tmp_path, scenarios, "vllm-llama/tp1-pp2-compile")
    v = verdict_of(run_dir, "vllm-llama/tp1-pp2-compile")
    assert v["verdict"] == "crash", v["reason"]
    assert v["crash"]["rank"].startswith("Worker_PP1 (vLLM worker: PP rank 1"), v["reason"]
    # compile is on, so the KeyError surfaces through Dynamo's tracing of the forward
    assert "KeyError" in v["crash"]["exception"] and "residual" in v["crash"]["exception"], v["reason"]
    assert "vllm/model_executor/models/llama.py" in v["crash"]["traceback"]  # the model's own frame
    assert 'intermediate_tensors["residual"]' in v["crash"]["traceback"]
    assert "the process the harness launched, launcher rank 0, saw:" in v["crash"]["traceback"]  # its generic error, as context
    assert result.returncode == 1
    assert not survivors(run_dir)
    assert not left_in_shared_memory(run_dir, "vllm-llama/tp1-pp2-compile")  # the crashed worker's too


def test_a_first_stage_that_raises_ends_the_engine_without_waiting_out_vllms_step_timeout(tmp_path):
    """PP rank 0's model step raises (the pp-step-raise fault, as MiniCPM's first stage did on
    CPU): vLLM's executor waits for the last stage's answer only, so without the harness's
    fail-fast (harness/engines/vllm/failfast.py) the engine waits out its 300 s step timeout.
    The worker ends itself 15 s after its step raised, and the crash names it and its error."""
    scenarios = suite_with_fault(tmp_path, "vllm-llama", "pp-step-raise@0")
    result, run_dir = run(tmp_path, scenarios, "vllm-llama/tp1-pp2-compile")
    v = verdict_of(run_dir, "vllm-llama/tp1-pp2-compile")
    assert v["verdict"] == "crash", v["reason"]
    assert v["crash"]["rank"].startswith("Worker_PP0 (vLLM worker: PP rank 0"), v["reason"]
    assert "harness fault pp-step-raise" in v["crash"]["exception"], v["reason"]
    log = (run_dir / "scenarios" / "vllm-llama__tp1-pp2-compile" / "logs" / "rank0.log").read_text()
    assert "the worker exits (70) so that the executor ends it" in log  # the fail-fast, not vLLM's timeout
    assert "RPC call to" not in log or "timed out" not in log
    assert result.returncode == 1
    assert not survivors(run_dir)


def test_an_engine_core_start_up_assertion_is_named_not_the_workers_it_let_go(tmp_path):
    """The engine core's own assertion (the pp-kv-layout fault: PP rank 1 reports KV-cache
    layouts the other stage does not, as Qwen3-Next's stages did on 0.32), after which vLLM
    logs its workers leaving with exit code 0: the crash names the core's exception and line."""
    scenarios = suite_with_fault(tmp_path, "vllm-llama", "pp-kv-layout@1")
    result, run_dir = run(tmp_path, scenarios, "vllm-llama/tp1-pp2")
    v = verdict_of(run_dir, "vllm-llama/tp1-pp2")
    assert v["verdict"] == "crash", v["reason"]
    assert v["crash"]["rank"].startswith("EngineCore (vLLM process"), v["reason"]
    assert v["crash"]["exception"].startswith("AssertionError: Workers disagree on supported KV cache layouts"), v["reason"]
    assert "attention/backends/utils.py" in v["crash"]["frame"], v["crash"]["frame"]
    assert result.returncode == 1
    assert not survivors(run_dir)


def test_what_vllm_applied_is_measured_in_its_workers(tmp_path):
    """A setting vLLM accepted is not proof it ran: the driver asks every worker
    what it holds and compiled (harness/engines/vllm/evidence.py), and the verdict shows it."""
    ids = ["vllm-llama/tp1-pp2-compile", "vllm-llama/tp2-pp1"]
    result, run_dir = run(tmp_path, ROOT / "scenarios", *ids)
    pp_compile, tp = verdict_of(run_dir, ids[0]), verdict_of(run_dir, ids[1])
    assert result.returncode == 0, result.stdout + result.stderr
    assert pp_compile["verdict"] == "pass" and tp["verdict"] == "pass", (pp_compile["reason"], tp["reason"])
    assert pp_compile["applied"]["pp"] == {"value": 2, "applied": True, "evidence": "stage 0: layers 0-1; stage 1: layers 2-3"}
    assert pp_compile["applied"]["compile"]["applied"] is True, pp_compile["applied"]
    assert "compilation counter" in pp_compile["applied"]["compile"]["evidence"]
    assert tp["applied"]["tp"] == {
        "value": 2,
        "applied": True,
        "evidence": "TP group size 2 on 2 workers; each attention layer holds 2 of 4 heads",
    }
    # the engine start split by what the workers did (startup.py), adding up to `load`
    start = pp_compile["timings"]["engine_start"]
    assert {"worker start + import", "model build + load", "KV cache sizing", "engine ready"} <= set(start), start
    assert sum(start.values()) <= pp_compile["timings"]["phases"]["load"] + 0.5, (start, pp_compile["timings"])


def test_drivers_from_the_pool_give_what_fresh_drivers_give_bit_for_bit(tmp_path):
    """Nothing is imported twice, to keep a real-engine start short: the driver forks from a
    rank-pool zygote that imported vLLM, and vLLM's engine core and workers fork from the
    driver (forking.py). Two different models in a row, one of them under TP, from one zygote,
    against the same two started as vLLM starts them on CPU by itself: fresh drivers
    (HARNESS_RANK_POOL=0) that spawn their processes (HARNESS_VLLM_FORK=0). Every output
    tensor equal, nothing left running either way."""
    from harness.contract.outputs import EngineOutputs
    from harness.contract.rundir import scenario_dir

    ids = ["vllm-llama/tp1-pp1", "vllm-archs/arch-qwen3-tp2-pp1"]
    pooled, pooled_dir = run(tmp_path / "pooled", ROOT / "scenarios", *ids)
    fresh = harness_cli(
        "run",
        "--report-dir",
        str(tmp_path / "fresh"),
        "--run-id",
        "r",
        *ids,
        timeout=900,
        env={"HARNESS_RANK_POOL": "0", "HARNESS_VLLM_FORK": "0"},
        what="harness run, drivers started fresh",
    )
    fresh_dir = tmp_path / "fresh" / "r"
    assert pooled.returncode == 0 and fresh.returncode == 0, pooled.stdout + fresh.stdout
    for sid in ids:
        a, b = (EngineOutputs.load(scenario_dir(d, sid) / "outputs") for d in (pooled_dir, fresh_dir))
        assert (a.meta["driver_preimported"], b.meta["driver_preimported"]) == (True, False), sid
        assert a.meta["started_by"] == {"engine_core": "fork", "workers": ["fork"]}, (sid, a.meta["started_by"])
        assert b.meta["started_by"] == {"engine_core": "spawn", "workers": ["spawn"]}, (sid, b.meta["started_by"])
        assert a.meta["kv_cache"] == {"via": "kv_cache_memory_bytes", "bytes": 128 << 20}, a.meta[
            "kv_cache"
        ]  # 0.32 reads the argument
        assert a.tensors.keys() == b.tensors.keys() and all(a.tensors[k].equal(b.tensors[k]) for k in a.tensors), sid
    assert not survivors(pooled_dir) and not survivors(fresh_dir)
    # a forked worker ends without the destructor that unlinks its communicator's shared
    # memory (a spawned one runs it): forking.py removes it as the worker exits
    tp_run = EngineOutputs.load(scenario_dir(pooled_dir, ids[1]) / "outputs")
    assert tp_run.meta["shared_memory"], tp_run.meta
    for d in (pooled_dir, fresh_dir):
        assert not left_in_shared_memory(d, ids[1])


def test_sp_is_unsupported_with_the_installed_vllms_reason(tmp_path):
    result, run_dir = run(tmp_path, ROOT / "scenarios", "vllm-llama/tp2-pp1-sp")
    v = verdict_of(run_dir, "vllm-llama/tp2-pp1-sp")
    assert v["verdict"] == "unsupported", v["reason"]
    assert "no sequence-parallel pass" in v["reason"] and "PassConfig" in v["reason"]
    assert result.returncode == 5  # its only scenario unsupported: nothing was tested


def test_which_architectures_vllm_serves_and_with_pp_is_asked_of_its_registry(tmp_path):
    """The arch axis: an architecture vLLM does not serve, or serves only for pooling,
    is `unsupported` with vLLM's own answer; one it serves is accepted under PP."""
    from harness.engines.vllm import VllmEngine

    engine = VllmEngine()
    for arch, said in [
        ("NoSuchForCausalLM", "does not serve architecture NoSuchForCausalLM"),
        ("BertModel", "not a text-generation model"),
        ("Qwen3ForCausalLM", None),
    ]:
        ckpt = tmp_path / arch
        ckpt.mkdir()
        (ckpt / "config.json").write_text(json.dumps({"architectures": [arch], "num_attention_heads": 4, "num_hidden_layers": 2}))
        reason = engine.unsupported_reason({"tp": 2, "pp": 2, "sp": False, "compile": False}, ckpt)
        if said is None:
            assert reason is None, (arch, reason)
        else:
            assert said in present(reason), (arch, reason)


def test_every_tiny_multimodal_prompt_marks_its_images_as_vllm_expects():
    """The chat template of each tiny multimodal checkpoint (harness/inputs/models/tiny_mm.py:
    a table, so every interpreter writes the same bytes) puts an image where vLLM's own
    model class says a prompt marks one (get_placeholder_str), for every arch of the
    image suites (the registry's among them)."""
    from harness.engines.vllm import default_python
    from harness.inputs import chat, models
    from harness.inputs.models import ArchModel
    from harness.inputs.scenarios.loading import load_suite

    archs = {}
    for name in ("vllm-mm-archs", "vllm-mm-registry", "vllm-mm-native-registry", "vllm-mm-one-image", "vllm-mm-hybrid"):
        for ref in load_suite(ROOT / "scenarios" / f"{name}.yaml").archs.values():
            assert isinstance(ref, ArchModel), ref  # the sweeps name vLLM's model classes, each its tiny checkpoint
            archs[ref.arch] = models.resolve(ref, str(default_python())).directory
    ask = (
        "import json, sys\n"
        "from vllm.model_executor.models.registry import ModelRegistry\n"
        "print(json.dumps({a: ModelRegistry._try_load_model_cls(a).get_placeholder_str('image', 1) for a in sys.argv[1:]}))"
    )
    done = subprocess.run([str(default_python()), "-c", ask, *archs], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    vllm_marks = json.loads(done.stdout.strip().splitlines()[-1])
    for arch, directory in archs.items():
        rendered = present(chat.template_of(directory)).render("\x00", chat.Media(images=1))  # a text no mark can contain
        mark = rendered[rendered.index("<s>") + 3 : rendered.index("\x00")]
        expected = vllm_marks[arch]
        if expected is None:  # vLLM leaves the mark to the model's chat template: the processor's own, or none
            own = [
                json.loads((directory / f).read_text()).get("image_token", "")
                for f in ("processor_config.json", "tokenizer_config.json")
            ]
            assert mark in ("", *own), arch  # the processor's token, in its config or its tokenizer's
        else:
            assert mark == expected, (arch, mark, expected)


def test_a_pp_stage_that_receives_zeros_besides_the_hidden_states_fails_on_numbers(tmp_path):
    """The silent form of the PP-boundary bug class (vLLM PRs 37622, 40786): the PP rank 1
    worker gets every tensor but the hidden states as zeros (pp-zero-aux@1). No exception
    anywhere; the multimodal archs under pp2 must still fail, on their logits."""
    scenarios = suite_with_fault(tmp_path, "vllm-mm-archs", "pp-zero-aux@1")
    # the covering array's rows (and so the ids below and the suite's gates) are the lock's
    lock = "vllm-mm-archs.yaml.lock"
    (scenarios / lock).write_text((ROOT / "scenarios" / lock).read_text())
    ids = ["vllm-mm-archs/arch-qwen3-vl-tp1-pp2-compile", "vllm-mm-archs/arch-llava-tp1-pp2-compile"]
    # ... and only where the stage reads what was zeroed: Cohere Compass's layers start with
    # `residual = hidden_states` (vLLM's cohere_compass.py), so the zeroed residual changes nothing
    unread = "vllm-mm-archs/arch-cohere-compass-tp1-pp2-compile"
    result, run_dir = run(tmp_path, scenarios, *ids, unread)
    assert result.returncode == 1, result.stdout + result.stderr
    v = verdict_of(run_dir, unread)
    assert v["verdict"] == "pass", v["reason"]
    assert any(ZEROED_MARK in line and "residual" in line for line in Path(v["logs"]["0"]).read_text().splitlines())
    for scenario in ids:
        v = verdict_of(run_dir, scenario)
        assert v["verdict"] == "fail", (scenario, v["reason"])
        logits = next(c for c in v["checks"] if c["name"] == "logits")
        assert not logits["passed"] and logits["metrics"]["max_abs_dlogprob"] > 0.05, (scenario, logits["summary"])
        # the fault's own evidence: what the stage received besides the hidden states, zeroed
        marked = [line for line in Path(v["logs"]["0"]).read_text().splitlines() if ZEROED_MARK in line]
        assert marked and "residual" in marked[-1].split(ZEROED_MARK)[1], (scenario, marked)
    assert not survivors(run_dir)


def test_deepstack_missing_from_the_compiled_graph_drops_the_image_score_under_compile_only(tmp_path):
    """vLLM PR 43617's bug class, re-created in vLLM's workers (compile-drop-deepstack): the
    trained tiny Qwen3-VL loses its deepstack inputs in the graph torch.compile traces. The
    compiled scenario's Geo3K-format score must drop against the eager golden with p < 0.01;
    the eager scenario, with the same fault switched on, must not move at all."""
    # the suite names its checkpoint relative to itself (../harness/inputs/zoo/...), as its golden does
    (tmp_path / "harness").symlink_to(ROOT / "harness")
    scenarios = suite_with_fault(tmp_path, "vllm-mm-evals", "compile-drop-deepstack")
    compiled, eager = "vllm-mm-evals/tp1-pp1-compile", "vllm-mm-evals/tp1-pp1"
    result, run_dir = run(tmp_path, scenarios, compiled, eager)
    assert result.returncode == 1, result.stdout + result.stderr
    v = verdict_of(run_dir, compiled)
    geo = next(c for c in v["checks"] if c["name"] == "eval:geo")
    m = geo["metrics"]
    assert v["verdict"] == "fail" and not geo["passed"], geo["summary"]
    assert m["p_value"] < 0.01 and m["flipped_to_wrong"] > m["flipped_to_right"], geo["summary"]
    v = verdict_of(run_dir, eager)
    geo = next(c for c in v["checks"] if c["name"] == "eval:geo")
    m = geo["metrics"]
    assert v["verdict"] == "pass", v["reason"]
    assert m["flipped_to_wrong"] == m["flipped_to_right"] == 0 and m["score"] == m["golden_score"] > 0.5, geo["summary"]
    assert not survivors(run_dir)


# What vLLM does in each worker it starts: resolve the fault extension class by name
# (worker_extension_cls), then run the model, which reads IntermediateTensors.
FAULTS_CHILD = """
import multiprocessing, sys

def worker(queue):
    import importlib
    importlib.import_module("harness.engines.vllm.faults").FaultExtension
    from vllm.sequence import IntermediateTensors
    queue.put(IntermediateTensors.__getitem__.__qualname__)

if __name__ == "__main__":
    from harness.engines.vllm import driver
    driver.arm_faults(["pp-drop-residual@1"])  # what the driver does before vllm.LLM()
    ctx = multiprocessing.get_context(sys.argv[1])
    queue = ctx.Queue()
    child = ctx.Process(target=worker, args=(queue,))
    child.start()
    print("WORKER-SEES", queue.get(timeout=300))
    child.join()
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_fault_switches_reach_a_worker_started_by(method, tmp_path):
    """vLLM forks its workers on GPUs and spawns them on CPU (its CPU platform forces
    spawn): a forked worker never imports faults.py again, so the switches must already
    be installed in the driver it is forked from; a spawned one imports it afresh."""
    from harness.contract.roots import import_root
    from harness.engines.vllm import default_python

    script = tmp_path / "start_worker.py"
    script.write_text(FAULTS_CHILD)
    env = {**os.environ, "PYTHONPATH": str(import_root())}
    done = subprocess.run([str(default_python()), str(script), method], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WORKER-SEES _install_pp_faults.<locals>.getitem" in done.stdout, (done.stdout, done.stderr[-2000:])


ARM_AFTER_A_STALE_VARIABLE = """
import os
os.environ["HARNESS_VLLM_FAULTS"] = "pp-zero-aux@0"  # left from elsewhere: importing installs it
from harness.engines.vllm import faults
from vllm.sequence import IntermediateTensors
patched = IntermediateTensors.__getitem__
assert faults._ON == {"pp-zero-aux": 0}, faults._ON
faults.arm(["pp-drop-residual@1"])  # the run's own faults replace it, the switch is not patched twice
assert faults._ON == {"pp-drop-residual": 1} and os.environ["HARNESS_VLLM_FAULTS"] == "pp-drop-residual@1", faults._ON
assert IntermediateTensors.__getitem__ is patched
faults.arm([])  # a clean run: nothing on, for this process and what it starts
assert faults._ON == {} and os.environ["HARNESS_VLLM_FAULTS"] == ""
print("ARMED-AS-ASKED")
"""


def test_arm_replaces_faults_a_stale_variable_installed_and_patches_once():
    """The installed switches read what is on at call time: arming the run's faults after an
    import that met a stale $HARNESS_VLLM_FAULTS leaves exactly the run's faults on."""
    from harness.contract.roots import import_root
    from harness.engines.vllm import default_python

    env = {**os.environ, "PYTHONPATH": str(import_root())}
    done = subprocess.run(
        [str(default_python()), "-c", ARM_AFTER_A_STALE_VARIABLE], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0 and "ARMED-AS-ASKED" in done.stdout, done.stderr[-3000:]


def test_every_installed_vllm_release_has_the_engine_shutdown_the_driver_uses():
    """driver.shutdown: vLLM's LLM has no public shutdown up to 0.32, so the driver stops
    the engine through its engine client; every installed release must have that path
    (or a public LLM.shutdown), else its runs end by the group kill."""
    from harness.engines.vllm import default_python
    from harness.inputs.engine_envs import installed_pythons

    ask = (
        "import inspect, vllm\n"
        "from vllm import LLM\n"
        "from vllm.v1.engine.llm_engine import LLMEngine\n"
        "from vllm.v1.engine.core_client import EngineCoreClient\n"
        "public = callable(getattr(LLM, 'shutdown', None))\n"
        "private = 'self.llm_engine' in inspect.getsource(LLM.__init__) and 'self.engine_core' in inspect.getsource(LLMEngine.__init__) "
        "and callable(getattr(EngineCoreClient, 'shutdown', None))\n"
        "print(vllm.__version__, public or private)\n"
    )
    pythons = [default_python(), *installed_pythons("vllm")]
    answers = [subprocess.run([str(p), "-c", ask], capture_output=True, text=True, timeout=300) for p in pythons]
    for python, done in zip(pythons, answers):
        assert done.returncode == 0 and done.stdout.split()[-1] == "True", (python, done.stdout, done.stderr[-2000:])


def test_the_census_counts_every_generator_of_vllms_registry_and_a_try_build_leaves_none_untried(tmp_path):
    """`harness archs`, the census: one line per text generator of the installed vLLM's registry,
    as many as the registry itself holds; after --try-build every line has a state but `not tried`."""
    from harness.engines.base import GENERATOR_SUFFIXES
    from harness.engines.vllm import VllmEngine

    ask = "import json\nfrom vllm.model_executor.models.registry import ModelRegistry\nprint(json.dumps(sorted(ModelRegistry.get_supported_archs())))"
    done = subprocess.run([str(VllmEngine().python()), "-c", ask], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    registry = json.loads(done.stdout.strip().splitlines()[-1])
    generators = sorted(a for a in registry if a.endswith(GENERATOR_SUFFIXES))

    listed = harness_cli("archs", "--json", "--report-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = json.loads(listed.stdout)
    assert sorted(line["arch"] for line in found["archs"]) == generators
    assert found["registered"] == len(registry) and sum(found["counts"].values()) == len(generators)

    tried = harness_cli("archs", "--json", "--try-build", "--only", "Llama*ForCausalLM", "--report-dir", str(tmp_path))
    assert tried.returncode == 0, tried.stderr[-3000:]
    lines = json.loads(tried.stdout)["archs"]
    assert {line["arch"] for line in lines} == {a for a in generators if a.startswith("Llama") and a.endswith("ForCausalLM")}
    assert all(line["state"] != "not tried" for line in lines), lines
