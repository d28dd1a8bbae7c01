#!/usr/bin/env bash
# Create .venv (if missing) and install sparsify with every extra. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[all,test]"
# The CUDA torch wheel pulls in triton, a GPU kernel compiler that CPU runs never use. Loaded after
# TensorFlow (e.g. by torchvision or torch.compile) its libtriton segfaults the process, so drop it.
if .venv/bin/python -m pip show -q triton >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q triton
fi
