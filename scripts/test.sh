#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONHASHSEED=0
exec .venv/bin/python -m pytest -n 2 --dist loadfile -q "$@"
