#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: the sparsify demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
exec .venv/bin/sparsify demo "$@"
