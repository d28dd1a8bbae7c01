"""The core never imports a framework, an adapter or the application, by any route.

The core is every module under ``sparsify/`` except the application: the
subpackage ``sparsify/cli/`` and ``sparsify/__main__.py`` (``python -m sparsify``
runs the command, so it must import ``sparsify.cli``). Two independent checks:

* each core module is imported on its own in a fresh interpreter, which then
  must hold none of the forbidden modules in ``sys.modules`` (catches every
  route, including transitive and ``importlib`` imports at import time);
* each core source is parsed and every ``import`` statement (function bodies
  included, relative imports resolved) is checked, and dynamic imports
  (``importlib.import_module``, ``__import__``, ``exec`` ...) are refused
  outright, so a lazy import inside a function cannot sneak in.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparsify"

#: Modules (and their submodules) the core must never import.
FORBIDDEN = ("tensorflow", "keras", "tf_keras", "torch", "torchvision", "torch_pruning", "jax", "jaxlib",
             "sparsify_tf", "sparsify_torch", "sparsify_keras", "sparsify.cli")
#: Calls that import or run code chosen at run time; the core uses plain import statements only.
DYNAMIC_IMPORT_CALLS = ("__import__", "import_module", "exec_module", "load_module", "run_module", "run_path",
                        "exec", "eval")
#: The application: may import anything.
APPLICATION = ("sparsify.cli", "sparsify.__main__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_application(module: str) -> bool:
    return any(module == app or module.startswith(app + ".") for app in APPLICATION)


def _is_forbidden(module: str) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN)


CORE_FILES = sorted(p for p in PACKAGE.rglob("*.py") if not _is_application(_module_name(p)))
CORE_MODULES = [_module_name(p) for p in CORE_FILES]


# ----- the checkers --------------------------------------------------------------------------------
def forbidden_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every import of a forbidden module and every dynamic import call in ``source`` (the code of ``module``).

    Relative imports are resolved against ``module``; ``from . import cli`` counts as importing
    ``sparsify.cli``. Returns ``"line N: ..."`` descriptions, empty when the source is clean.
    """
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
            if prefix == "importlib" and any(a.name in DYNAMIC_IMPORT_CALLS for a in node.names):
                found.append(f"line {node.lineno}: imports a dynamic import function from importlib")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in DYNAMIC_IMPORT_CALLS:
                found.append(f"line {node.lineno}: dynamic import call {ast.unparse(node)}")
        bad = sorted({n for n in names if _is_forbidden(n)})
        if bad:
            found.append(f"line {node.lineno}: imports {', '.join(bad)}")
    return found


_PROBE = """\
import importlib, json, sys
module = importlib.import_module(sys.argv[1])
print(json.dumps({"file": module.__file__, "modules": sorted(sys.modules)}))
"""


def modules_loaded_by(module: str, path: Path = ROOT) -> tuple[str, list[str]]:
    """Import ``module`` alone in a fresh interpreter (``path`` first on sys.path).

    Returns the file it came from and the forbidden modules then in ``sys.modules``.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
    out = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True, text=True, env=env,
                         timeout=120, cwd=path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["file"], [m for m in data["modules"] if _is_forbidden(m)]


# ----- the core ------------------------------------------------------------------------------------
def test_the_core_is_every_module_but_the_application():
    assert {"sparsify", "sparsify.config", "sparsify.patterns", "sparsify.protocol"} <= set(CORE_MODULES)
    assert not any(m.startswith("sparsify.cli") for m in CORE_MODULES) and "sparsify.__main__" not in CORE_MODULES


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_alone_loads_no_framework_adapter_or_application(module):
    file, loaded = modules_loaded_by(module)
    assert Path(file).resolve().is_relative_to(PACKAGE), f"{module} was imported from {file}, not this tree"
    assert loaded == [], f"importing {module} loads {loaded}"


@pytest.mark.parametrize("path", CORE_FILES, ids=CORE_MODULES)
def test_core_source_has_no_forbidden_or_dynamic_import(path):
    found = forbidden_imports(path.read_text(), _module_name(path), path.name == "__init__.py")
    assert found == [], f"{path.relative_to(ROOT)}: " + "; ".join(found)


# ----- the rooms of the core ----------------------------------------------------------------------
#: Each room (a subpackage of the core) and the other core modules it may import: nothing above it.
ROOMS = {"sparsify.selection": ("sparsify.threads",),
         "sparsify.channels": ("sparsify.selection",),
         "sparsify.adapter_helpers": ("sparsify.native_stderr",)}
#: Modules that moved into a room: none of these names may come back to the top level.
MOVED = {"sparsify.channel_config": "sparsify.channels.config", "sparsify.channel_groups": "sparsify.channels.groups",
         "sparsify.channel_selection": "sparsify.channels.selection"}


def core_imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """The ``sparsify`` modules ``source`` (the code of ``module``) imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "sparsify"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            if prefix.split(".")[0] == "sparsify":
                found.add(prefix)
    return found


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_a_room_imports_nothing_above_it(room):
    files = sorted((PACKAGE / room.split(".", 1)[1].replace(".", "/")).rglob("*.py"))
    assert files, f"room {room} has no modules"
    allowed = ROOMS[room]
    for path in files:
        module = _module_name(path)
        for name in core_imports(path.read_text(), module, path.name == "__init__.py"):
            inside = name == room or name.startswith(room + ".")
            assert inside or any(name == a or name.startswith(a + ".") for a in allowed), \
                f"{module} imports {name}: the room {room} may import only itself and {allowed}"


def test_moved_modules_live_in_their_room_only():
    core = set(CORE_MODULES)
    assert set(MOVED.values()) <= core
    assert not [m for m in core if any(m == old or m.startswith(old + ".") for old in MOVED)]


def test_room_checker_resolves_relative_imports():
    assert core_imports("from ..threads import x\nfrom . import kernel\nfrom ..patterns.base import P",
                        "sparsify.selection.cut") == {"sparsify.threads", "sparsify.selection", "sparsify.patterns.base"}


# ----- the checkers catch planted violations ------------------------------------------------------
@pytest.mark.parametrize("source, needle", [
    ("import torch", "imports torch"),
    ("import numpy as np, torch.nn as nn", "imports torch.nn"),
    ("def f():\n    import tensorflow as tf\n    return tf", "line 2: imports tensorflow"),
    ("from keras import layers", "imports keras"),
    ("from tf_keras.layers import Dense", "imports tf_keras"),
    ("import torchvision.models", "imports torchvision.models"),
    ("import torch_pruning", "imports torch_pruning"),
    ("import jax.numpy as jnp", "imports jax.numpy"),
    ("from sparsify_keras import prune_model", "imports sparsify_keras"),
    ("class A:\n    def m(self):\n        from sparsify_tf.keras import PruningCallback",
     "line 3: imports sparsify_tf"),
    ("from sparsify_torch import prune", "imports sparsify_torch"),
    ("from .cli import main", "imports sparsify.cli"),
    ("from . import cli", "imports sparsify.cli"),
    ("from .cli.report import build_report", "imports sparsify.cli.report"),
    ("import sparsify.cli.demo", "imports sparsify.cli.demo"),
    ("import importlib\ndef f():\n    return importlib.import_module('numpy')", "line 3: dynamic import call"),
    ("from importlib import import_module", "dynamic import function from importlib"),
    ("tf = __import__('tensorflow')", "dynamic import call __import__('tensorflow')"),
    ("exec('import torch')", "dynamic import call exec"),
])
def test_source_checker_catches_planted_violations(source, needle):
    found = forbidden_imports(source, "sparsify.planted")
    assert any(needle in f for f in found), found


def test_source_checker_resolves_relative_imports():
    # inside a core subpackage, `..cli` is sparsify.cli but `.cli` is not
    assert forbidden_imports("from ..cli import main", "sparsify.patterns.nm") == [
        "line 1: imports sparsify.cli, sparsify.cli.main"]
    assert forbidden_imports("from .cli import x", "sparsify.patterns", is_package=True) == []
    assert forbidden_imports("from .cli import x", "sparsify", is_package=True) == [
        "line 1: imports sparsify.cli, sparsify.cli.x"]
    clean = "import re\nimport numpy as np\nfrom .layout import to_2d\nfrom sparsify.config import PruningConfig\n"
    assert forbidden_imports(clean, "sparsify.planted") == []


def test_fresh_interpreter_check_catches_an_importlib_route(tmp_path):
    # a module that reaches the application through importlib at import time: the source scan
    # refuses the call, and the fresh interpreter sees sparsify.cli in sys.modules
    (tmp_path / "planted.py").write_text(textwrap.dedent("""\
        import importlib
        _app = importlib.import_module("sparsify" + ".cli")
    """))
    file, loaded = modules_loaded_by("planted", tmp_path)
    assert Path(file) == tmp_path / "planted.py"
    assert "sparsify.cli" in loaded and "sparsify.cli.command" in loaded
    assert forbidden_imports((tmp_path / "planted.py").read_text(), "planted")
