"""README.md: the two fresh-machine commands first, short, links that resolve, headline figures taken from
bench/RESULTS.md; the generated pages (docs/config.md, docs/benchmarks.md, the API pages) are current
(scripts/update_docs.py)."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from sparsify import PruningConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
RESULTS = (ROOT / "bench" / "RESULTS.md").read_text()
# Pages the README may link to before they exist (none today).
PENDING: set[str] = set()


def _updater():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _section(text: str, name: str) -> str:
    return text.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]


def test_two_commands_come_first():
    blocks = re.findall(r"^    (\S.*)$", README.split("## ", 1)[0], flags=re.M)
    assert blocks[:2] == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_readme_is_short_and_keeps_the_figure_slot():
    visible = re.sub(r"<!--.*?-->\n?", "", README, flags=re.S)
    assert len(visible.splitlines()) <= 170          # the longer examples live in docs/ (issue 58)
    assert README.count("\n<!-- accuracy-figure -->\n") == 1


def test_links_resolve_and_every_guide_is_linked():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path = (page.parent / target).resolve()
            name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else target
            assert path.exists() or name in PENDING, f"{page.name} links to {target}, which does not exist"
    linked = set(re.findall(r"\]\((docs/[\w.]+\.md)\)", README))
    guides = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} - {"docs/index.md"}
    assert guides | PENDING <= linked, f"README does not link {sorted(guides | PENDING - linked)}"


def test_headline_figures_come_from_the_results_file():
    headline = README.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    figures = re.findall(r"(?<![\w.])\d+\.\d+(?:x|%)?", headline)
    assert len(figures) >= 8
    for figure in figures:
        assert re.search(r"(?<![\d.])" + re.escape(figure) + r"(?![\d])", RESULTS), \
            f"README headline figure {figure} is not in bench/RESULTS.md"


def test_the_comparison_table_cites_what_was_measured():
    table = README.split("## How it compares", 1)[1].split("\n## ", 1)[0]
    if "off by one at some steps" in table:          # tfmot's counts: bench_keras lists where they differ
        assert "pruned count (float32 schedule and rounding) differs from the exact count: step" in RESULTS


def test_config_reference_covers_every_field_and_is_current():
    page = (ROOT / "docs" / "config.md").read_text()
    section = _section(page, "config-reference")
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, flags=re.M)
    assert [name for name, _ in rows] == [f.name for f in dataclasses.fields(PruningConfig)]
    defaults = PruningConfig()
    for name, shown in rows:
        value = getattr(defaults, name)
        assert shown == (str(value).lower() if isinstance(value, bool) else repr(value)), name
    assert _updater().config_reference().strip() == section.strip()


def test_what_the_config_reference_says_about_loading(tmp_path):
    """Bad values raise ValueError, wrong types TypeError; `pruning:` nests keys in a YAML file only."""
    text = _section((ROOT / "docs" / "config.md").read_text(), "config-reference")
    assert "`TypeError`" in text and "a dict may not" in text
    with pytest.raises(ValueError, match="end_step"):
        PruningConfig(end_step=-5, start_step=0)
    with pytest.raises(TypeError, match="end_step"):
        PruningConfig(end_step="10")
    f = tmp_path / "p.yaml"
    f.write_text("pruning:\n  pattern: 2:4\n")
    assert PruningConfig.coerce(str(f)).pattern == "2:4"
    with pytest.raises(ValueError, match="pruning"):
        PruningConfig.coerce({"pruning": {"pattern": "2:4"}})


def test_benchmarks_page_is_a_copy_of_results():
    section = _section((ROOT / "docs" / "benchmarks.md").read_text(), "bench-results")
    for name in re.findall(r"<!-- ([\w-]+):start -->", RESULTS):
        assert f"## {name}" in section, f"docs/benchmarks.md lacks {name}: run python scripts/update_docs.py"
    assert section.strip() == _updater().bench_section()


def test_generated_files_are_current():
    assert _updater().main(["--check"]) == 0, "run python scripts/update_docs.py"


def _commands() -> list[list[str]]:
    """Every `sparsify ...` command in the README's code blocks (split on '&&', comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                words = shlex.split(part)
                if words[:1] == ["sparsify"]:
                    out.append(words[1:])
    return out


def test_readme_commands_parse_and_init_writes_their_config(tmp_path):
    """The quickstart writes its config with `sparsify init` before `schedule --config` reads it (issue 58: the
    README used a prune.yaml that only the repository held)."""
    from sparsify.cli import build_parser
    from sparsify.cli.starter_config import DEFAULT_PATH, write_starter_config

    commands = _commands()
    assert {c[0] for c in commands} == {"demo", "report", "export", "init", "schedule"}
    written = set()
    for args in commands:
        build_parser().parse_args(args)                      # every option the README shows exists
        if args[0] == "init":
            written.add(next((a for a in args[1:] if not a.startswith("-")), DEFAULT_PATH))
        if "--config" in args:
            name = args[args.index("--config") + 1]
            assert name in written, f"the README uses {name} before a 'sparsify init' line writes it"
            write_starter_config(tmp_path / name)
            assert PruningConfig.coerce(str(tmp_path / name)).pattern == "4x1"
    assert written


def test_readme_names_the_extras_its_examples_need():
    """[plot] for --plot, [deploy] for the ONNX export (which brings torch, what the export runs on), one line
    with every framework for the pages that use two, and what to do about triton beside TensorFlow."""
    import configparser

    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    for extra in ("plot", "deploy", "all"):
        assert f'pip install "sparsify-train[{extra}]"' in install, extra
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    deploy = {re.split(r"[=<>\[]", line)[0] for line in setup["options.extras_require"]["deploy"].split()}
    assert {"onnx", "onnxruntime", "torch"} <= deploy          # sparsify_torch.onnx_export imports all three
    assert "pip uninstall triton" in install and "segmentation fault" in install
