"""Refresh the generated parts of the documentation.

* ``docs/config.md``, between ``<!-- config-reference:start -->`` and ``<!-- config-reference:end -->``:
  the config reference, generated from ``dataclasses.fields(PruningConfig)``, the allowed values the
  config module validates against (the pattern and schedule registries included) and the class
  docstring's ``Attributes:`` section;
* ``docs/benchmarks.md``, between ``<!-- bench-results:start -->`` and ``<!-- bench-results:end -->``:
  a copy of ``bench/RESULTS.md`` (its title dropped);
* ``docs/api/``: the public surface users import, grouped by framework (``API_SURFACE``): one page per
  package (a mkdocstrings ``::: package`` directive, which renders the names of its ``__all__``), an
  index page listing every name, and the ``API reference`` part of ``mkdocs.yml``'s nav, between
  ``# api-nav:start`` and ``# api-nav:end``. Internal modules get no page of their own;
* the ``Guides`` part of that nav (between ``# guides-nav:start`` and ``# guides-nav:end``): the guides of
  ``GUIDES`` that exist, in that order, then any other page of ``docs/`` under its first heading.

Usage::

    python scripts/update_docs.py          # rewrite what is out of date
    python scripts/update_docs.py --check  # exit 1 if anything is out of date
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:          # document this checkout's packages, not an installed copy
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "RESULTS.md"
CONFIG_PAGE = ROOT / "docs" / "config.md"
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"
API_DIR = ROOT / "docs" / "api"
MKDOCS = ROOT / "mkdocs.yml"
PACKAGES = ("sparsify", "sparsify_keras", "sparsify_tf", "sparsify_torch")
# The guides in reading order, with their titles in the site's navigation.
GUIDES = (("The core and its masks", "core.md"), ("Config reference", "config.md"), ("PyTorch", "torch.md"),
          ("Hugging Face transformers", "huggingface.md"), ("Lightning", "lightning.md"),
          ("Structured channel pruning", "channels.md"), ("Keras", "keras.md"), ("TensorFlow graphs", "tf_graph.md"),
          ("Sharded and multi-worker training", "distributed.md"), ("Distillation while pruning", "distillation.md"),
          ("The sparsify command", "cli.md"),
          ("Shipping a pruned model", "export.md"), ("Sparse and int8", "quantization.md"), ("Migrating from other libraries", "migrating.md"))
# Pages of docs/ with their own place in the navigation (not guides).
OTHER_PAGES = ("index.md", "design.md", "benchmarks.md")
# The packages users import, by framework: the API reference documents their ``__all__``.
API_SURFACE = (("Core (NumPy only)", ("sparsify", "sparsify.patterns", "sparsify.schedules", "sparsify.distributed",
                                      "sparsify.channels.selection")),
               ("PyTorch", ("sparsify_torch", "sparsify_torch.channels")),
               ("Keras 3 on every backend, and tf-keras", ("sparsify_keras", "sparsify_tf.keras")),
               ("TensorFlow graphs", ("sparsify_tf",)),
               ("The sparsify command", ("sparsify.cli",)))

__all__ = ["config_reference", "bench_section", "public_modules", "exported_names", "api_page", "api_index",
           "api_nav", "guides_nav", "render", "outputs", "main"]


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

    builtin = ("magnitude", "snip", "snip_momentum", "wanda")     # the shipped ones, not a test's registrations
    choices = {"pruning_scope": SCOPES, "sparsity_decay_type": registered_schedules(),
               "criterion": tuple(c for c in CRITERIA if c in builtin),
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
        return {"exponent": "> 0", "pruned_decay": ">= 0 (finite; not 0: `pruned_gradient=\"straight_through\"`)"}.get(
            name, "[0, 1)")
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
    extra = ("\nLoad a config with `PruningConfig.coerce(x)`: a `PruningConfig`, a dict of these keys or a YAML "
             "file path (a YAML file may also nest the keys under one top-level `pruning:` key; a dict may not). "
             "Unknown keys and bad values raise `ValueError`, a value of the wrong type (`end_step=\"10\"`) "
             "`TypeError`, both naming the key and the value. YAML files are read safely, and an unquoted N:M "
             "pattern (`pattern: 2:4`) stays a string (plain YAML 1.1 would read it as the number 124).")
    return "\n".join(rows) + "\n" + extra


def bench_section() -> str:
    """``bench/RESULTS.md`` without its title and its section markers, its links made relative to ``docs/``."""
    if not RESULTS.exists():
        return "_No benchmark has been run yet (bench/RESULTS.md is missing)._"
    text = RESULTS.read_text()
    text = re.sub(r"\A# [^\n]*\n", "", text).strip()
    text = text.replace("](../docs/", "](")          # links relative to bench/ become relative to docs/
    return re.sub(r"<!-- [\w-]+:(start|end) -->\n?", "", text).strip()


def public_modules(root: Path = ROOT) -> list[str]:
    """Dotted names of the public modules of the three packages (no part starting with ``_``), sorted.

    Examples:
        >>> "sparsify.config" in public_modules() and "sparsify.__main__" not in public_modules()
        True
        >>> "sparsify_tf.graph.pruning" in public_modules()
        True
    """
    names = []
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not any(part.startswith("_") for part in parts):
                names.append(".".join(parts))
    return sorted(names)


def exported_names(package: str, root: Path = ROOT) -> list[str]:
    """The literal ``__all__`` of ``package``'s ``__init__.py``, read without importing it (no TF or torch).

    Example:
        >>> "PruningConfig" in exported_names("sparsify")
        True
    """
    init = root.joinpath(*package.split("."), "__init__.py")
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{init} has no literal __all__")


def api_page(package: str) -> str:
    """The Markdown of ``docs/api/<package>.md``: a title and the mkdocstrings directive (its ``__all__``)."""
    return f"# `{package}`\n\n::: {package}\n"


def api_index(surface=API_SURFACE) -> str:
    """The Markdown of ``docs/api/index.md``: every exported name, by framework and package, linked."""
    lines = ["# API reference", "",
             "The names each package exports (its `__all__`), grouped by framework. Import them from the package",
             "named, not from the modules they live in: those may move.", ""]
    for group, packages in surface:
        lines += [f"## {group}", ""]
        for package in packages:
            names = ", ".join(f"[`{n}`]({package}.md#{package}.{n})" for n in exported_names(package)
                              if not n.startswith("_"))          # the site hides _names (mkdocs.yml filters)
            lines += [f"- [`{package}`]({package}.md): {names}"]
        lines.append("")
    return "\n".join(lines)


def api_nav(surface=API_SURFACE) -> str:
    """The ``API reference`` entries of ``mkdocs.yml``'s nav: the index, then one section per framework."""
    lines = ["      - Index: api/index.md"]
    for group, packages in surface:
        lines.append(f"      - {json.dumps(group)}:")
        lines += [f"          - {p}: api/{p}.md" for p in packages]
    return "\n".join(lines)


def guides_nav(docs: Path = ROOT / "docs") -> str:
    """The ``Guides`` entries of ``mkdocs.yml``'s nav: the ``GUIDES`` that exist, then other pages of ``docs/``."""
    entries = [(title, name) for title, name in GUIDES if (docs / name).exists()]
    known = {name for _, name in GUIDES} | set(OTHER_PAGES)
    for page in sorted(docs.glob("*.md")):
        if page.name not in known:
            heading = re.search(r"^# (.+)$", page.read_text(), flags=re.M)
            entries.append((heading.group(1).replace("`", "") if heading else page.stem, page.name))
    return "\n".join(f"      - {json.dumps(title)}: {name}" for title, name in entries)


def _replace(text: str, name: str, body: str, *, comment: str = "<!-- {} -->", where: str = "") -> str:
    start, end = comment.format(f"{name}:start"), comment.format(f"{name}:end")
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{where} has no {start} ... {end} markers")
    indent = re.search(r"([ \t]*)" + re.escape(start), text).group(1)
    return pattern.sub(lambda _: f"{start}\n{body.rstrip()}\n{indent}{end}", text)


def render(path: Path, text: str) -> str:
    """``text`` (the content of ``path``) with its generated sections refreshed."""
    if path == CONFIG_PAGE:
        return _replace(text, "config-reference", config_reference(), where=path.name)
    if path == BENCH_PAGE:
        return _replace(text, "bench-results", bench_section(), where=path.name)
    if path == MKDOCS:
        text = _replace(text, "guides-nav", guides_nav(), comment="# {}", where=path.name)
        return _replace(text, "api-nav", api_nav(), comment="# {}", where=path.name)
    raise ValueError(f"no generated section in {path}")


def outputs() -> dict[Path, str]:
    """Every generated file and the content it should have now."""
    out = {path: render(path, path.read_text()) for path in (CONFIG_PAGE, BENCH_PAGE, MKDOCS)}
    out[API_DIR / "index.md"] = api_index()
    for _, packages in API_SURFACE:
        for package in packages:
            out[API_DIR / f"{package}.md"] = api_page(package)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is out of date")
    args = parser.parse_args(argv)
    wanted = outputs()
    stale_pages = sorted(p for p in API_DIR.glob("*.md") if p not in wanted)
    changed = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for path in changed + stale_pages:
            print(f"{path.relative_to(ROOT)} is out of date: run python scripts/update_docs.py", file=sys.stderr)
        return 1 if changed or stale_pages else 0
    for path in changed:
        path.write_text(wanted[path])
        print(f"{path.relative_to(ROOT)} updated")
    for path in stale_pages:      # the page of a module that no longer exists
        path.unlink()
        print(f"{path.relative_to(ROOT)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
