#!/bin/bash
# A Keras 3 user on JAX needs neither TensorFlow nor torch (issue 33): install sparsify-train (this checkout) with the `jax` extra
# only into a fresh virtual environment, check that TensorFlow and torch are absent, and run the Keras 3 tests
# of the JAX backend and the README's Keras quickstart there. Needs the package registry (pip).
#
#   bash scripts/check_without_tensorflow.sh [VENV]      # default VENV: /tmp/sparsify-jax-only
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/sparsify-jax-only}
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q -e ".[jax]" pytest hypothesis
"$venv/bin/python" - <<'PY'
import importlib.util
missing = [m for m in ("tensorflow", "tf_keras", "torch") if importlib.util.find_spec(m) is None]
assert missing == ["tensorflow", "tf_keras", "torch"], f"installed with the jax extra: {missing}"
PY
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=2
"$venv/bin/python" -m pytest -q -p no:cacheprovider -k jax \
    tests/sparsify_keras/test_backends.py tests/sparsify_keras/test_distribution.py \
    tests/sparsify_keras/test_without_tensorflow.py
"$venv/bin/python" - <<'PY'
import importlib.util, os, sys, tempfile
from pathlib import Path
# the README's blocks with their setup comments, read as the docs tests read them (loaded by path: tests/ has
# folders named like the packages, which would shadow the editable install on sys.path)
spec = importlib.util.spec_from_file_location("docs_blocks", "tests/test_docs_blocks.py")
docs_blocks = sys.modules["docs_blocks"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_blocks)
blocks = [b for b in docs_blocks.extract(Path("README.md").resolve()) if "from sparsify_keras import" in b.code]
assert blocks, "no Keras 3 block in README.md"
os.chdir(tempfile.mkdtemp())
for b in blocks:
    exec(b.setup + "\n" + b.code, {})
    print(f"README.md:{b.line} ran on Keras 3 with the JAX backend, TensorFlow not installed")
PY
