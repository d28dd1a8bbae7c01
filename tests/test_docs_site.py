"""The documentation site (mkdocs.yml): the guides of docs/ and the API reference (one page per package users
import, by framework, and an index of every exported name) build with warnings as errors, so a renamed module,
function or parameter cannot leave a broken reference."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, NO_MKDOCS_2_WARNING="1", TF_CPP_MIN_LOG_LEVEL="2")


def _updater():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, env=ENV, capture_output=True, text=True, timeout=300)


def _nav_pages(nav) -> list[str]:
    out = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return out


def test_the_api_reference_is_the_public_surface_by_framework():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    updater = _updater()
    packages = [p for _, group in updater.API_SURFACE for p in group]
    assert {"sparsify", "sparsify_tf", "sparsify_torch", "sparsify_keras", "sparsify_tf.keras",
            "sparsify_torch.channels"} <= set(packages)
    assert [p for p in pages if p.startswith("api/")] == ["api/index.md"] + [f"api/{p}.md" for p in packages]
    assert sorted(p.name for p in (ROOT / "docs" / "api").glob("*.md")) == sorted(["index.md"] + [f"{p}.md" for p in
                                                                                                  packages])
    for package in packages:
        assert (ROOT / "docs" / "api" / f"{package}.md").read_text() == f"# `{package}`\n\n::: {package}\n"
    index = (ROOT / "docs" / "api" / "index.md").read_text()
    assert "[`PruningConfig`](sparsify.md#sparsify.PruningConfig)" in index
    assert "[`PruningCallback`](sparsify_keras.md#sparsify_keras.PruningCallback)" in index
    assert "npz_stream" not in index                       # internal modules are not the reference
    guides = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert guides <= set(pages), f"pages missing from the nav (run python scripts/update_docs.py): " \
                                 f"{sorted(guides - set(pages))}"
    assert "design.md" in pages


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    res = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-5000:]
    assert not re.search(r"^WARNING", res.stderr, flags=re.M), res.stderr[-5000:]
    page = (tmp_path / "site" / "api" / "sparsify_tf" / "index.html").read_text()
    assert 'id="sparsify_tf.prune_graph"' in page                 # rendered from the docstrings
    keras = (tmp_path / "site" / "api" / "sparsify_keras" / "index.html").read_text()
    assert all(f'id="sparsify_keras.{n}"' in keras for n in _updater().exported_names("sparsify_keras"))
    core = (tmp_path / "site" / "api" / "sparsify" / "index.html").read_text()
    assert 'id="sparsify.PruningConfig"' in core and "&gt;&gt;&gt;" in core   # the Example: doctests as code


@pytest.mark.slow
def test_a_stale_reference_fails_the_build(tmp_path):
    """What the strict build guards against: a page naming an object that was renamed."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# API\n\n::: sparsify.config.PruningConfigRenamed\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: t\ndocs_dir: docs\nplugins:\n  - mkdocstrings:\n      handlers:\n"
                      f"        python:\n          paths: [{ROOT}]\n")
    res = _build(config, tmp_path / "site")
    assert res.returncode != 0 and "PruningConfigRenamed" in res.stderr


@pytest.mark.slow
def test_guides_nav_lists_the_guides_that_exist_then_new_pages(tmp_path):
    for name, text in {"torch.md": "# T", "core.md": "# C", "index.md": "# I", "zeta.md": "# The `zeta` page\n"}.items():
        (tmp_path / name).write_text(text)
    assert _updater().guides_nav(tmp_path).splitlines() == [
        '      - "The core and its masks": core.md', '      - "PyTorch": torch.md', '      - "The zeta page": zeta.md']


def test_example_sections_extension_reads_the_project_conventions():
    spec = importlib.util.spec_from_file_location("example_sections", ROOT / "docs" / "api" / "example_sections.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = "Run it.\n\nArgs:\n    a, b: the sides,\n        in metres.\n    c: alone.\n\nExample:\n    >>> 1\n    1\n"
    assert mod.convert(doc) == ("Run it.\n\nArgs:\n    a: the sides,\n        in metres.\n    b: the sides,\n"
                                "        in metres.\n    c: alone.\n\nExamples:\n    >>> 1\n    1")
    assert mod.convert("Returns:\n    x, y: a pair.") == "Returns:\n    x, y: a pair."   # only parameter lists
