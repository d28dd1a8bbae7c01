"""scripts/setup.sh heals and does not repeat itself (issue 14, point 7): a .venv made by an older Python is
moved aside and rebuilt, and the package is installed again only when the packaging files change.

Run on a copy of the script in a scratch tree with a stand-in Python whose ``-m venv`` and ``-m pip`` only
record what they were asked (the real ones would download and install every extra); ``-c`` checks run the
real interpreter, so the version and import checks are the script's own."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/sh
# stand-in interpreter: -c runs the real one; -m venv / -m pip are recorded
echo "$0 $*" >> "{log}"
if [ "$1" = "-c" ] || [ "$1" = "-V" ]; then exec "{real}" "$@"; fi
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0
fi
exit 0
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "sparsify").mkdir()
    (tree / "sparsify" / "__init__.py").write_text("")
    for f in ("setup.cfg", "pyproject.toml", "scripts/setup.sh"):
        shutil.copy(ROOT / f, tree / f)
    log = tmp_path / "calls.log"
    fake = tmp_path / "python3.11"
    _executable(fake, FAKE_PYTHON.format(log=log, real=sys.executable))
    return tree, fake, log


def _setup(tree: Path, fake: Path, log: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    log.write_text("")
    res = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHON=str(fake)))
    return res, [ln.split(" ", 1)[1] for ln in log.read_text().splitlines() if " -m " in ln]


def test_installs_once_and_again_only_after_a_change(tmp_path):
    tree, fake, log = _tree(tmp_path)
    res, calls = _setup(tree, fake, log)
    assert res.returncode == 0, res.stderr
    assert calls == ["-m venv .venv", "-m pip install -q --upgrade pip", '-m pip install -q -e .[all,test]',
                     "-m pip show -q triton", "-m pip uninstall -y -q triton"]
    res, calls = _setup(tree, fake, log)
    assert res.returncode == 0 and calls == [], calls             # nothing changed: nothing reinstalled
    with open(tree / "setup.cfg", "a") as fh:
        fh.write("\n# a new pin\n")
    res, calls = _setup(tree, fake, log)
    assert res.returncode == 0 and '-m pip install -q -e .[all,test]' in calls
    assert "-m venv .venv" not in calls                            # the environment itself is kept


def test_a_venv_of_an_older_python_is_rebuilt(tmp_path):
    tree, fake, log = _tree(tmp_path)
    (tree / ".venv" / "bin").mkdir(parents=True)
    _executable(tree / ".venv" / "bin" / "python", "#!/bin/sh\nif [ \"$1\" = -V ]; then echo 'Python 3.8.18'; exit 0; fi\n"
                                                   "exit 1\n")
    (tree / ".venv" / "marker").write_text("old")
    res, calls = _setup(tree, fake, log)
    assert res.returncode == 0, res.stderr
    assert f"setup: .venv was made by Python 3.8.18; moving it to .venv.old and rebuilding it with Python " \
           f"{sys.version_info.major}.{sys.version_info.minor}" in res.stderr
    assert (tree / ".venv.old" / "marker").read_text() == "old"
    assert calls[0] == "-m venv .venv" and '-m pip install -q -e .[all,test]' in calls
    res, calls = _setup(tree, fake, log)
    assert res.returncode == 0 and calls == [] and res.stderr == ""


def test_refuses_an_old_interpreter(tmp_path):
    tree, _, log = _tree(tmp_path)
    old = tmp_path / "python3.8"
    _executable(old, "#!/bin/sh\nexit 1\n")
    res, _ = _setup(tree, old, log)
    assert res.returncode == 1 and "is missing or older than Python 3.11" in res.stderr and not (tree / ".venv").exists()


def test_the_old_distribution_of_this_checkout_is_removed_first(tmp_path):
    """Installed as `sparsify` before issue 47, this checkout is now `sparsify-train`: the old record goes first."""
    tree, fake, log = _tree(tmp_path)
    site = tmp_path / "site"
    info = site / "sparsify-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sparsify\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(f'{{"url": "file://{tree}", "dir_info": {{"editable": true}}}}')
    log.write_text("")
    res = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHON=str(fake), PYTHONPATH=str(site)))
    calls = [ln.split(" ", 1)[1] for ln in log.read_text().splitlines() if " -m " in ln]
    assert res.returncode == 0, res.stderr
    assert calls[:4] == ["-m venv .venv", "-m pip install -q --upgrade pip", "-m pip uninstall -y -q sparsify",
                         '-m pip install -q -e .[all,test]']
