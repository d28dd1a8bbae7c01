"""Griffe extension for the documentation site: reads the project's docstring conventions.

* ``Example:`` sections are rendered as examples (griffe knows only ``Examples:`` and would render
  the doctest lines as Markdown);
* an ``Args:`` or ``Attributes:`` entry naming several parameters (``a, b: text``) documents each of them.

Loaded by ``mkdocs.yml`` (``extensions:`` of the python handler).
"""
from __future__ import annotations

import re

import griffe

__all__ = ["ExampleSections", "convert"]

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)
_LISTS = ("Args:", "Arguments:", "Attributes:", "Parameters:")
_SHARED = re.compile(r"^(\s+)(\w+(?:\s*,\s*\w+)+):(.*)$")


def _split_shared_entries(text: str) -> str:
    out: list[str] = []
    section_indent: int | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if line.strip() in _LISTS:
            section_indent = indent
        elif line.strip() and section_indent is not None and indent <= section_indent:
            section_indent = None
        m = _SHARED.match(line) if section_indent is not None else None
        if m:
            body = [m.group(3)]
            while i + 1 < len(lines) and lines[i + 1].strip() and \
                    len(lines[i + 1]) - len(lines[i + 1].lstrip()) > len(m.group(1)):
                i += 1
                body.append(lines[i])
            for name in re.split(r"\s*,\s*", m.group(2)):
                out.append(f"{m.group(1)}{name}:{body[0]}")
                out.extend(body[1:])
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


def convert(text: str) -> str:
    """A docstring in griffe's Google style.

    Examples:
        >>> convert("Args:\\n    a, b: the sides.\\nExample:\\n    >>> 1\\n    1")
        'Args:\\n    a: the sides.\\n    b: the sides.\\nExamples:\\n    >>> 1\\n    1'
    """
    return _split_shared_entries(_EXAMPLE.sub(r"\1Examples:", text))


class ExampleSections(griffe.Extension):
    """Apply :func:`convert` to every docstring before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
