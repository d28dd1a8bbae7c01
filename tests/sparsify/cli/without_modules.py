"""A helper of the CLI tests: run ``sparsify ARGS`` in a subprocess in which some frameworks are not installed,
as far as the import system can tell (no real venvs needed)."""
from __future__ import annotations

import os
import subprocess
import sys

# Runs `sparsify ARGS` with the modules named in argv[1] absent: every finder on sys.meta_path is told to find
# none of them (find_spec returns None, as for a module that is not installed), then lists any that got loaded.
_ABSENT = """
import sys
ABSENT = set(sys.argv[1].split(","))
class Hidden:
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in ABSENT:
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(fullname, path, target) if find is not None else None
    def __getattr__(self, name):
        return getattr(self.finder, name)
sys.meta_path[:] = [Hidden(f) for f in sys.meta_path]
from sparsify.cli import main
rc = main(sys.argv[2:])
print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in ABSENT), file=sys.stderr)
sys.exit(rc)
"""


def run_without(absent: tuple[str, ...], *args: str, cwd=None, **env: str) -> subprocess.CompletedProcess:
    """``sparsify ARGS`` with the top-level modules ``absent`` hidden, in ``cwd``, with ``env`` added to the
    environment (``SPARSIFY_DEBUG``, ``KERAS_BACKEND`` and ``KERAS_HOME`` removed unless given); asserts none of them loaded."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
    for k in ("SPARSIFY_DEBUG", "KERAS_BACKEND", "KERAS_HOME"):
        if k not in env:
            full_env.pop(k, None)
    res = subprocess.run([sys.executable, "-c", _ABSENT, ",".join(absent), *args], capture_output=True, text=True,
                         timeout=600, env=full_env, cwd=cwd)
    assert "loaded: []" in res.stderr, res.stderr
    return res
