"""Safe, bounded YAML for config files and ``--set`` values.

Config files come from users and from other people's repositories, so
loading one must never run code, eat the machine or print a wall of text.
:func:`yaml_loader` is a ``yaml.SafeLoader`` (no Python objects) that also:

* keeps an unquoted N:M pattern a string (``pattern: 2:4``; YAML 1.1 would
  read the base-60 integer 124);
* refuses a key that appears twice in one mapping (instead of letting the
  last one win silently), naming the key and both lines;
* refuses documents nested deeper than :data:`MAX_DEPTH` levels (instead of a
  ``RecursionError``) and alias/anchor structures that expand to more than
  :data:`MAX_NODES` nodes (the "billion laughs" attack), before anything is
  built from them.

:func:`load_yaml_mapping` reads a config file with these rules; it refuses
anything but a regular file of at most :data:`MAX_FILE_BYTES`, binary and
non-UTF-8 content, and names the file in every ``ValueError``.

Example:
    >>> load_yaml_text("pattern: 2:4\\nend_step: 1_000")
    {'pattern': '2:4', 'end_step': 1000}
    >>> load_yaml_text("a: 1\\na: 2", source="c.yaml")
    Traceback (most recent call last):
    ...
    ValueError: c.yaml: duplicate key 'a' on line 2 (first on line 1)
"""
from __future__ import annotations

import os
import re
import stat
from typing import Any, Mapping

import yaml

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_FILE_BYTES", "YAMLLimitError", "yaml_loader", "load_yaml_text",
           "load_yaml_mapping", "read_config_text", "shorten"]

#: Deepest nesting of sequences and mappings accepted (a config is 2 or 3 levels deep).
MAX_DEPTH = 64
#: Most nodes a document may expand to once aliases are followed.
MAX_NODES = 10_000
#: Largest config file read.
MAX_FILE_BYTES = 1 << 20


class YAMLLimitError(yaml.YAMLError):
    """A document over one of this module's bounds, or with a duplicate key."""


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was.

    Example:
        >>> shorten("x" * 500, 20)
        'xxxxxxxxxxxxxxxxxxxx... (500 characters)'
    """
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _expanded_size(root: yaml.Node) -> None:
    """Raise :class:`YAMLLimitError` if ``root`` expands past :data:`MAX_NODES` nodes or :data:`MAX_DEPTH` levels.

    Aliases make the node graph a DAG (or a cycle); sizes and heights are
    memoised per node, so a bomb is measured in time linear in its text.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: yaml.Node, depth: int) -> None:
        key = id(node)
        if key in size:
            if depth + height[key] > MAX_DEPTH:
                raise YAMLLimitError(f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded")
            return
        if key in active:
            raise YAMLLimitError(f"a recursive alias (&anchor used inside itself) on line {node.start_mark.line + 1}")
        if depth > MAX_DEPTH:
            raise YAMLLimitError(f"nesting deeper than {MAX_DEPTH} levels (line {node.start_mark.line + 1})")
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        active.add(key)
        total, tallest = 1, 0
        for child in children:
            visit(child, depth + 1)
            total += size[id(child)]
            tallest = max(tallest, height[id(child)])
            if total > MAX_NODES:
                raise YAMLLimitError(f"aliases expand to more than {MAX_NODES} nodes (an alias/anchor bomb?); "
                                     "write the values out")
        active.discard(key)
        size[key], height[key] = total, tallest + 1

    visit(root, 0)


class _Loader(yaml.SafeLoader):
    """SafeLoader without base-60 numbers, with bounds and duplicate-key checks."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLLimitError(f"nesting deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None:
            _expanded_size(node)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                ident = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if ident in seen:
                    raise YAMLLimitError(f"duplicate key {shorten(key_node.value, 80)!r} on line {line} "
                                         f"(first on line {seen[ident]})")
                seen[ident] = line
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
               r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def yaml_loader() -> type:
    r"""The ``yaml`` loader class behind this module (use with ``yaml.load(text, Loader=yaml_loader())``).

    Everything that plain ``yaml.safe_load`` accepts loads the same, except
    base-60 numbers (``2:4`` stays a string), duplicate keys, and documents
    past :data:`MAX_DEPTH` / :data:`MAX_NODES` (:class:`YAMLLimitError`).

    Example:
        >>> yaml.load("pattern: 2:4\nend_step: 1_000", Loader=yaml_loader())
        {'pattern': '2:4', 'end_step': 1000}
    """
    return _Loader


def _one_line(e: BaseException) -> str:
    return shorten(" ".join(str(e).split()), 400)


def load_yaml_text(text: str, source: str = "<yaml>") -> Any:
    """Parse one YAML document with :func:`yaml_loader`; ``ValueError`` naming ``source`` if it is refused.

    Example:
        >>> load_yaml_text("[" * 100 + "]" * 100, source="--set x")
        Traceback (most recent call last):
        ...
        ValueError: --set x: nesting deeper than 64 levels (line 1)
    """
    try:
        return yaml.load(text, Loader=_Loader)
    except YAMLLimitError as e:
        raise ValueError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{source} is not valid YAML: {_one_line(e)}") from None
    except RecursionError:          # a bound above should stop this first; never a traceback
        raise ValueError(f"{source}: nesting too deep to read") from None


def read_config_text(path: str | os.PathLike, what: str = "config file") -> str:
    """The text of a small regular UTF-8 file; ``ValueError`` naming the file otherwise."""
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except OSError as e:
        raise ValueError(f"{what} {name!r} cannot be read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{what} {name!r} is a directory, not a YAML file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {name!r} is not a regular file (a pipe, socket or device); pass a YAML file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{what} {name!r} is {st.st_size} bytes, more than a config can be "
                         f"({MAX_FILE_BYTES} bytes); is it the right file?")
    try:
        with open(name, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{what} {name!r} cannot be read: {e.strerror}") from None
    if b"\x00" in raw:
        raise ValueError(f"{what} {name!r} is a binary file (it holds NUL bytes), not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {name!r} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                         "save it as UTF-8") from None


def load_yaml_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """The config keys of a YAML file (a top-level ``pruning:`` key is unwrapped).

    Raises:
        ValueError: naming the file, if it is missing, not a regular file, too
            large, binary or not UTF-8, not YAML, over a bound of
            :func:`yaml_loader`, or does not hold a mapping.

    Example:
        >>> import tempfile
        >>> f = os.path.join(tempfile.mkdtemp(), "c.yaml")
        >>> _ = open(f, "w").write("pruning:\\n  pattern: 2:4\\n")
        >>> load_yaml_mapping(f)
        {'pattern': '2:4'}
    """
    name = os.fspath(path)
    data = load_yaml_text(read_config_text(name), source=f"config file {name!r}")
    if data is None:
        data = {}
    if isinstance(data, Mapping) and set(data) == {"pruning"}:
        data = data["pruning"]
    if not isinstance(data, Mapping):
        raise ValueError(f"config file {name!r} must hold a mapping of config keys, got {type(data).__name__}")
    return dict(data)
