"""Run SparseML's own TF-v1 pruning tests against sparsify_tf, through a shim that only maps module names.

Needs a checkout of SparseML that you already have (nothing is downloaded):

    python scripts/run_sparseml_tests.py /path/to/sparseml [extra pytest args]

It writes a throwaway ``sparseml`` package whose ``tensorflow_v1.optim`` and
``tensorflow_v1.utils`` re-export sparsify_tf's names (``tf_compat`` is
``tf.compat.v1``, graph mode as under TF 1) and runs, unmodified, the checkout's
``tests/sparseml/tensorflow_v1/optim/test_mask_pruning.py`` and
``test_mask_creator_pruning.py`` (which import ``tests.sparseml.tensorflow_v1.helpers``
from the checkout). The checkout's own conftest files and settings are not used.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("tests/sparseml/tensorflow_v1/optim/test_mask_pruning.py",
         "tests/sparseml/tensorflow_v1/optim/test_mask_creator_pruning.py")
SHIM = {
    "sparseml/__init__.py": "",
    "sparseml/tensorflow_v1/__init__.py":
        "import tensorflow as tf\n\ntf.compat.v1.disable_eager_execution()   # TF 1 semantics: graph mode\n",
    "sparseml/tensorflow_v1/optim/__init__.py":
        "from sparsify_tf.seed.mask_creator_pruning import *  # noqa: F401,F403\n"
        "from sparsify_tf.seed.mask_pruning import *  # noqa: F401,F403\n",
    "sparseml/tensorflow_v1/utils/__init__.py":
        "import tensorflow as tf\n\nfrom sparsify_tf.seed.utils import *  # noqa: F401,F403\n\n"
        "tf_compat = tf.compat.v1\n",
    "pytest.ini": "[pytest]\nmarkers =\n    flaky: SparseML's marker (no rerun plugin here)\n",
}


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    checkout = Path(argv[0]).resolve()
    missing = [t for t in TESTS + ("tests/sparseml/tensorflow_v1/helpers.py",) if not (checkout / t).is_file()]
    if missing:
        print(f"not in {checkout}: {', '.join(missing)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="sparseml_shim_") as shim:
        for rel, text in SHIM.items():
            path = Path(shim, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join([shim, str(checkout), str(ROOT)])}
        cmd = [sys.executable, "-m", "pytest", "-c", str(Path(shim, "pytest.ini")), "--rootdir", str(checkout),
               "--noconftest", "-p", "no:cacheprovider", "-p", "no:xdist", *TESTS, *argv[1:]]
        return subprocess.call(cmd, cwd=checkout, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
