#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the test suite, in tiers:
#   bash scripts/test.sh          every test (what CI runs: .ci/run)
#   bash scripts/test.sh --fast   the fast tier for day-to-day work: tests not marked `slow` (pyproject.toml)
# Other arguments go to pytest. The 25 slowest tests are listed at the end (--durations=25).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow")
fi
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONHASHSEED=0
exec .venv/bin/python -m pytest -n 2 --dist loadfile -q --durations=25 ${tier[@]+"${tier[@]}"} "$@"
