"""What a new user installs (issue 47): our distribution name, its extras, the LICENSE in the wheel.

Every ``pip install`` command in README.md and docs/*.md names our distribution (``sparsify-train``, or ``.`` for
this checkout) with extras that setup.cfg declares. The one exception is a benchmark peer installed aside with
``pip install --target DIR`` (docs/benchmarks.md), which never touches the user's environment. In the messages of
our packages, the scripts and the notebooks, every requirement that is ours follows the same rule (they may also
name plain packages: ``pip install tensorboard``, the scripts' ``pytest``). The registry's ``sparsify`` is an unrelated project: no text names it as ours.
"""
from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparsify.extras import DISTRIBUTION, EXTRAS, install_command

ROOT = Path(__file__).resolve().parents[1]
SETUP = configparser.ConfigParser()
SETUP.read(ROOT / "setup.cfg")
DECLARED = set(SETUP["options.extras_require"])
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# install_command() builds our messages from a template; its doctest shows what they say
SOURCES = [p for pkg in ("sparsify", "sparsify_tf", "sparsify_keras", "sparsify_torch", "scripts", "notebooks")
           for p in sorted((ROOT / pkg).rglob("*")) if p.suffix in (".py", ".sh", ".ipynb")
           and p != ROOT / "sparsify" / "extras.py"]
_PIP = re.compile(r"pip[\"']? install ([^`\n;&)]*)")        # also "$venv/bin/pip" install
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?(.*)$")
_OPTIONS_WITH_VALUE = {"--target", "-t", "--index-url", "-i", "--extra-index-url", "-c", "--constraint"}


def install_targets(command: str) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The (name, extras) of each requirement of one ``pip install`` command's arguments, and its options.

    >>> install_targets('-q -e ".[all,test]"')
    ([('.', ['all', 'test'])], ['-q', '-e'])
    >>> install_targets('--target /tmp/x --no-deps tfmot==0.8 dm-tree')
    ([('tfmot', []), ('dm-tree', [])], ['--target', '--no-deps'])
    """
    words = shlex.split(command.replace("\\", " "), comments=True)
    targets, options, i = [], [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            options.append(word)
            i += 2 if word in _OPTIONS_WITH_VALUE else 1
            continue
        name, extras, _ = _REQUIREMENT.match(word).groups()
        targets.append((name, [e.strip() for e in extras.split(",")] if extras else []))
        i += 1
    return targets, options


def _commands(path: Path) -> list[str]:
    """The arguments of each ``pip install`` in a file; in source code, cut where the string literal closes."""
    out = []
    for m in _PIP.finditer(path.read_text()):
        command = m.group(1).strip()
        while command:
            try:
                shlex.split(command.replace("\\", " "), comments=True)
                break
            except ValueError:                       # an unbalanced quote: the enclosing literal's
                command = command[:-1]
        out.append(command)
    return out


def test_install_targets_reads_names_extras_and_options():
    assert install_targets('"sparsify-train[jax]"') == ([("sparsify-train", ["jax"])], [])
    assert install_targets("sparsify-train") == ([("sparsify-train", [])], [])
    assert install_targets("--index-url https://x/cpu torch==2.14.1") == ([("torch", [])], ["--index-url"])


def test_our_name_and_extras_are_setup_cfgs():
    assert SETUP["metadata"]["name"] == DISTRIBUTION == "sparsify-train"
    assert set(EXTRAS) == DECLARED
    assert install_command("keras-torch") == 'pip install "sparsify-train[keras-torch]"'
    with pytest.raises(ValueError, match="extra must be one of tf, jax, .*got 'tensorflow'"):
        install_command("tensorflow")


def test_every_install_line_names_our_distribution_and_a_declared_extra():
    checked = 0
    for path, command in ((p, c) for p in PAGES + SOURCES for c in _commands(p)):
        checked += 1
        targets, options = install_targets(command)
        if "--target" in options or "-t" in options:      # a benchmark peer, installed aside
            assert all(not name.startswith("sparsify") for name, _ in targets), command
            continue
        if path.suffix in (".py", ".sh", ".ipynb"):         # code may name plain packages too (tensorboard, pytest)
            targets = [(n, e) for n, e in targets if n.startswith("sparsify") or n == "."]
        elif not targets:
            raise AssertionError(f"{path.name}: 'pip install {command}' installs nothing")
        for name, extras in targets:
            assert name in (DISTRIBUTION, "."), f"{path.name}: 'pip install {command}' installs {name!r}, not ours"
            assert set(extras) <= DECLARED, f"{path.name}: 'pip install {command}': extras {extras} not in setup.cfg"
    assert checked >= 15                                    # the pages' and the messages' commands were found


def test_no_text_names_the_unrelated_project_as_ours():
    for path in PAGES + SOURCES:
        text = path.read_text()
        assert not re.search(r"(?<![\w-])sparsify\[", text), f"{path.name} names 'sparsify[...]', the registry's project"
        for extras in re.findall(rf"{DISTRIBUTION}\[([^\]]*)\]", text):
            assert set(e.strip() for e in extras.split(",")) <= DECLARED, f"{path.name}: {DISTRIBUTION}[{extras}]"


def test_the_readme_has_an_install_line_per_framework():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Install", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = {line.split("#", 1)[1].strip(): line.split("#", 1)[0].strip() for line in block.splitlines()}
    expected = {"core only": "pip install sparsify-train",
                "Keras 3 on JAX": 'pip install "sparsify-train[jax]" && export KERAS_BACKEND=jax',
                "Keras 3 on PyTorch": 'pip install "sparsify-train[keras-torch]" && export KERAS_BACKEND=torch',
                "Keras 3 on TensorFlow": 'pip install "sparsify-train[tf]" && export KERAS_BACKEND=tensorflow',
                "tf-keras": 'pip install "sparsify-train[tf]"',
                "PyTorch": 'pip install "sparsify-train[torch]"'}
    for what, command in expected.items():
        assert [c for comment, c in lines.items() if comment.startswith(what)] == [command], what
    assert "TF graphs" in block and "download.pytorch.org/whl/cpu" in readme
    assert "unrelated project" in readme


@pytest.mark.slow
def test_the_wheel_carries_the_license(tmp_path):
    """The wheel built from this checkout (no build isolation: nothing is downloaded) holds LICENSE."""
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text and len(license_text.splitlines()) == 202
    assert SETUP["metadata"]["license_files"].split() == ["LICENSE"]
    src = tmp_path / "src"
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name) if src.exists() else (src.mkdir(), shutil.copy(ROOT / name, src / name))
    for package in ("sparsify", "sparsify_tf", "sparsify_keras", "sparsify_torch"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "out"), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("*.whl")
    assert wheel.name == "sparsify_train-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        assert z.read("sparsify_train-0.1.0.dist-info/licenses/LICENSE").decode() == license_text
        metadata = z.read("sparsify_train-0.1.0.dist-info/METADATA").decode()
    assert "Name: sparsify-train\n" in metadata and "License-File: LICENSE\n" in metadata
