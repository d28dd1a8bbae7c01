#!/usr/bin/env bash
# Create .venv and install this checkout (the distribution sparsify-train) with every extra. Idempotent, and it heals:
# - a .venv made by a Python older than 3.11 (or whose Python is gone) is moved aside to
#   .venv.old and rebuilt with $PYTHON (default python3);
# - the package is (re)installed only when setup.cfg, pyproject.toml or this script changed
#   since the last successful install, or the installed package is not this checkout's
#   (a stamp in .venv records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MIN='(3, 11)'
new_enough() { "$1" -c "import sys; sys.exit(0 if sys.version_info[:2] >= $MIN else 1)" >/dev/null 2>&1; }

if ! new_enough "$PY"; then
  echo "setup: $PY is missing or older than Python 3.11; run with PYTHON=/path/to/python3.11 or newer" >&2
  exit 1
fi
if [ -e .venv ] && ! new_enough .venv/bin/python; then
  old=$(.venv/bin/python -V 2>&1 || echo "a Python that no longer runs")
  echo "setup: .venv was made by $old; moving it to .venv.old and rebuilding it with $("$PY" -V 2>&1)" >&2
  rm -rf .venv.old            # the previous copy this script moved aside, if any
  mv .venv .venv.old
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi

STAMP=.venv/.sparsify-setup
WANT="$(cat setup.cfg pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1) $PWD"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && \
   .venv/bin/python -c "import os, sys, sparsify; sys.exit(os.path.dirname(os.path.abspath(sparsify.__file__)) != os.path.abspath('sparsify'))" >/dev/null 2>&1; then
  exit 0                      # nothing changed since the last install
fi
.venv/bin/python -m pip install -q --upgrade pip
# Before issue 47 this checkout was installed as the distribution `sparsify` (the registry's name of an unrelated
# project); ours is `sparsify-train`. Remove that old install of this checkout first (its record also lists the
# `sparsify` command, which the new install writes again); the registry's own `sparsify` is left alone.
if .venv/bin/python -c "import json, os, sys, importlib.metadata as m
urls = [json.loads(d.read_text('direct_url.json') or '{}').get('url') for d in m.distributions(name='sparsify')]
sys.exit('file://' + os.path.abspath('.') not in urls)" >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q sparsify
fi
.venv/bin/python -m pip install -q -e ".[all,test]"
# The CUDA torch wheel pulls in triton, a GPU kernel compiler that CPU runs never use. Loaded after
# TensorFlow (e.g. by torchvision or torch.compile) its libtriton segfaults the process, so drop it.
if .venv/bin/python -m pip show -q triton >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q triton
fi
echo "$WANT" > "$STAMP"
