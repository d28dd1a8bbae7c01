"""README.md: the two fresh-machine commands first, a config reference that covers every key,
and the benchmark sections copied from bench/RESULTS.md (bench/update_readme.py)."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

from sparsify import PruningConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _updater():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "bench" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_two_commands_come_first():
    blocks = re.findall(r"^    (\S.*)$", README.split("## ", 1)[0], flags=re.M)
    assert blocks[:2] == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_config_reference_covers_every_field_and_is_current():
    section = README.split("<!-- config-reference:start -->")[1].split("<!-- config-reference:end -->")[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, flags=re.M)
    assert [name for name, _ in rows] == [f.name for f in dataclasses.fields(PruningConfig)]
    defaults = PruningConfig()
    for name, shown in rows:
        value = getattr(defaults, name)
        assert shown == (str(value).lower() if isinstance(value, bool) else repr(value)), name
    # the committed table is exactly what the generator writes now
    assert _updater().config_reference().strip() == section.strip()


def test_bench_section_is_a_copy_of_results():
    mod = _updater()
    section = README.split("<!-- bench-results:start -->")[1].split("<!-- bench-results:end -->")[0]
    results = (ROOT / "bench" / "RESULTS.md")
    if results.exists():
        for name in re.findall(r"<!-- ([\w-]+):start -->", results.read_text()):
            assert f"### {name}" in section, f"README lacks benchmark {name}: run python bench/update_readme.py"
    rendered = mod.render(README)
    assert rendered.count("<!-- bench-results:start -->") == 1 and mod.bench_section() in rendered


def _commands() -> list[list[str]]:
    """Every `sparsify ...` command in the README's code blocks (split on '&&', comments dropped)."""
    import shlex

    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                words = shlex.split(part)
                if words[:1] == ["sparsify"]:
                    out.append(words[1:])
    return out


def test_readme_commands_parse_and_their_config_ships():
    from sparsify.cli import build_parser

    commands = _commands()
    assert {c[0] for c in commands} == {"demo", "report", "export", "schedule"}
    for args in commands:
        build_parser().parse_args(args)                      # every option the README shows exists
        if "--config" in args:
            path = ROOT / args[args.index("--config") + 1]
            assert path.is_file(), f"the README uses {path.name}, which is not shipped"
            assert PruningConfig.coerce(str(path)).pattern == "4x1"


def test_readme_mentions_what_users_need():
    for needle in ("log_dir=", "--seed", "--no-progress", "--set", "**exact**", "--fit-schedule", "sparsify export",
                   "prune.yaml", "--prune-classifier", "excluded_op_names"):
        assert needle in README, needle
