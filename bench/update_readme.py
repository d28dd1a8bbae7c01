"""Refresh the generated sections of README.md.

* between ``<!-- config-reference:start -->`` and ``<!-- config-reference:end -->``:
  the config reference, generated from ``dataclasses.fields(PruningConfig)``,
  the allowed values the config module validates against (the pattern and
  schedule registries included) and the class docstring's ``Attributes:`` section;
* between ``<!-- bench-results:start -->`` and ``<!-- bench-results:end -->``:
  a copy of ``bench/RESULTS.md`` (its title dropped, headings demoted one level).

Usage::

    python bench/update_readme.py          # rewrite README.md
    python bench/update_readme.py --check  # exit 1 if README.md is out of date
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "RESULTS.md"

__all__ = ["config_reference", "bench_section", "render", "main"]


def _descriptions(doc: str) -> dict[str, str]:
    """``{field: text}`` from the ``Attributes:`` section (``a, b: text`` lines cover several fields)."""
    out: dict[str, str] = {}
    lines = doc.split("Attributes:", 1)[1].split("Example:", 1)[0].splitlines()
    current: list[str] = []
    for line in lines:
        m = re.match(r"^\s{8}([a-z_, ]+):\s*(.*)$", line)
        if m:
            current = [n.strip() for n in m.group(1).split(",")]
            for n in current:
                out[n] = m.group(2).strip()
        elif line.strip() and current:
            for n in current:
                out[n] += " " + line.strip()
    return out


def _allowed(name: str, default: object) -> str:
    from sparsify.config import SCOPES
    from sparsify.criteria import CRITERIA
    from sparsify.patterns import BLOCK_REDUCTIONS, pattern_examples, registered_patterns
    from sparsify.schedules import registered_schedules

    choices = {"pruning_scope": SCOPES, "sparsity_decay_type": registered_schedules(), "criterion": CRITERIA,
               "block_score_reduce": BLOCK_REDUCTIONS}
    if name in choices:
        return ", ".join(f"`{c}`" for c in choices[name])
    if name == "pattern":      # the registered families and their example names
        return "; ".join(f"`{family}`: " + ", ".join(f"`{e}`" for e in pattern_examples(family))
                         for family in registered_patterns())
    if name in ("op_names", "excluded_op_names"):
        return "list of regular expressions (`re.search` on weight names)"
    if isinstance(default, bool):
        return "`true`, `false`"
    if isinstance(default, float):
        return "[0, 1)" if name != "exponent" else "> 0"
    if isinstance(default, int):
        if name == "pruning_frequency":
            return "integer (<= 0: every step)"
        return "integer >= 0" + (" (>= start_step)" if name == "end_step" else "")
    return "-"


def config_reference() -> str:
    """Markdown table of every ``PruningConfig`` field: name, default, allowed values, meaning."""
    from sparsify.config import PruningConfig

    desc = _descriptions(PruningConfig.__doc__ or "")
    rows = ["| key | default | allowed values | meaning |", "|---|---|---|---|"]
    defaults = PruningConfig()
    for f in dataclasses.fields(PruningConfig):
        default = getattr(defaults, f.name)
        shown = f"`{default!r}`" if not isinstance(default, bool) else f"`{str(default).lower()}`"
        text = desc.get(f.name, "").replace("``", "`").replace("|", "\\|")
        rows.append(f"| `{f.name}` | {shown} | {_allowed(f.name, default)} | {text} |")
    extra = ("\nLoad a config with `PruningConfig.coerce(x)` (a `PruningConfig`, a dict or a YAML path; a top-level "
             "`pruning:` key is accepted). Unknown keys and bad values raise `ValueError` naming the key and the "
             "value. YAML files are read safely, and an unquoted N:M pattern (`pattern: 2:4`) stays a string "
             "(plain YAML 1.1 would read it as the number 124).")
    return "\n".join(rows) + "\n" + extra


def bench_section() -> str:
    """``bench/RESULTS.md`` without its title, headings demoted one level."""
    if not RESULTS.exists():
        return "_No benchmark has been run yet (bench/RESULTS.md is missing)._"
    text = RESULTS.read_text()
    text = re.sub(r"\A# [^\n]*\n", "", text).strip()
    text = re.sub(r"<!-- [\w-]+:(start|end) -->\n?", "", text)
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.M).strip()


def _replace(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {start} ... {end} markers")
    return pattern.sub(lambda _: f"{start}\n{body.strip()}\n{end}", text)


def render(text: str) -> str:
    """README text with both generated sections refreshed."""
    text = _replace(text, "config-reference", config_reference())
    return _replace(text, "bench-results", bench_section())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is out of date")
    args = parser.parse_args(argv)
    old = README.read_text()
    new = render(old)
    if args.check:
        if new != old:
            print("README.md is out of date: run python bench/update_readme.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        README.write_text(new)
        print("README.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
