"""Pattern families by name: ``register_pattern``, ``get_pattern`` and the names help texts show.

A family is a :class:`~sparsify.patterns.base.Pattern` subclass registered
under a family name; its ``parse(name)`` says which pattern strings are its
own. ``get_pattern`` asks the families in registration order.

Example:
    >>> registered_patterns()
    ('NxM', 'N:M', 'OxIxK')
    >>> get_pattern("2:4").N, get_pattern({"pattern": "4x1", "pruning_scope": "global"}).is_global
    (2, True)
    >>> pattern_examples()[:9]
    ('1x1', '4x1', '1x4', '2x2', 'channelx1', '1xchannel', '2:4', '1:4', '4:8')
    >>> pattern_examples("OxIxK")
    ('channelx1xkernel', '1x1xkernel', '1x4x1', '2x2x1', '1xchannelx1')
"""
from __future__ import annotations

from typing import Any, Callable

from .base import Pattern, config_value

__all__ = ["register_pattern", "unregister_pattern", "registered_patterns", "get_pattern", "pattern_examples", "pattern_summaries",
           "pattern_family"]

_REGISTRY: dict[str, type[Pattern]] = {}


def register_pattern(name: str) -> Callable[[type[Pattern]], type[Pattern]]:
    """Class decorator registering a pattern family under ``name``.

    The class must implement ``parse(pattern_string)`` returning keyword
    arguments for its constructor, or ``None`` if the string is not its own;
    it should list a few accepted names in ``examples`` and describe them in
    ``summary`` (help texts are built from both).

    Example:
        >>> "NxM" in registered_patterns()
        True
    """
    def wrap(cls: type[Pattern]) -> type[Pattern]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"pattern name {name!r} is already registered by {_REGISTRY[name].__name__}")
        _REGISTRY[name] = cls
        cls.family = name
        return cls
    return wrap


def unregister_pattern(name: str) -> None:
    """Remove a registered family (tests and experiments); ``ValueError`` if it is not registered."""
    if name not in _REGISTRY:
        raise ValueError(f"pattern family {name!r} is not registered; registered: {registered_patterns()}")
    del _REGISTRY[name]


def registered_patterns() -> tuple[str, ...]:
    """Names of the registered pattern families, in registration order."""
    return tuple(_REGISTRY)


def pattern_examples(family: str | None = None) -> tuple[str, ...]:
    """Example pattern names of one family, or of all families in registration order.

    Example:
        >>> pattern_examples("N:M")
        ('2:4', '1:4', '4:8')
    """
    if family is not None:
        if family not in _REGISTRY:
            raise ValueError(f"family must be one of {registered_patterns()}, got {family!r}")
        return tuple(_REGISTRY[family].examples)
    return tuple(e for cls in _REGISTRY.values() for e in cls.examples)


def pattern_summaries() -> dict[str, str]:
    """``{family: one-line description of its names}`` for help texts and the config reference.

    Example:
        >>> pattern_summaries()["N:M"]
        'N:M with 0 < N < M: N pruned of every M consecutive weights along the last axis of the 2-D view'
    """
    return {name: cls.summary for name, cls in _REGISTRY.items()}


def pattern_family(name: str) -> tuple[type[Pattern], dict[str, Any]]:
    """The family class that accepts ``name`` and its parsed constructor keywords.

    Raises ``ValueError`` listing the registered families and examples for an unknown name.

    Example:
        >>> cls, kwargs = pattern_family("channelx4")
        >>> cls.__name__, kwargs
        ('PatternNxM', {'rows': None, 'cols': 4})
    """
    for cls in _REGISTRY.values():
        kwargs = cls.parse(name)
        if kwargs is not None:
            return cls, kwargs
    shown = ", ".join(repr(e) for e in pattern_examples())
    raise ValueError(f"pattern must be one of the registered families {registered_patterns()} "
                     f"(e.g. {shown}), got {name!r}")


def get_pattern(config: Any) -> Pattern:
    """Build a pattern from a name (``"4x1"``), a dict, a ``PruningConfig`` or a ``Pattern``.

    Example:
        >>> get_pattern({"pattern": "2:4", "pruning_scope": "global"}).is_global
        True
    """
    if isinstance(config, Pattern):
        return config
    name = config_value(config, "pattern", "1x1")
    if not isinstance(name, str):
        raise TypeError(f"pattern must be a string such as '4x1' or '2:4', got {name!r}")
    cls, _ = pattern_family(name)
    return cls(config)
