"""The one construction and export of a config dataclass: ``from_dict`` / ``from_yaml`` / ``coerce`` / ``to_dict``,
shared by :class:`sparsify.PruningConfig` and :class:`sparsify.DistillationConfig`.

A config is a dataclass that subclasses :class:`ConfigBase` and validates its fields in ``__post_init__``;
the base checks the keys of a dict against the fields (a "did you mean" hint), reads YAML safely
(:mod:`sparsify.yaml_io`) and accepts an instance, a dict or a YAML path wherever a config is taken.

Example:
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Settings(ConfigBase):
    ...     KEY_WORD = "settings"
    ...     temperature: float = 1.0
    >>> Settings.coerce({"temperature": 2}).to_dict()
    {'temperature': 2}
    >>> Settings.from_dict({"temprature": 2})
    Traceback (most recent call last):
    ...
    ValueError: unknown settings key 'temprature' (did you mean 'temperature'?)
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any, ClassVar, Mapping, TypeVar

__all__ = ["ConfigBase", "checked_fields"]

C = TypeVar("C", bound="ConfigBase")


def checked_fields(cls: type, data: Any, what: str) -> dict[str, Any]:
    """``data`` as a dict of fields of the dataclass ``cls``.

    Args:
        cls: the dataclass whose field names are the allowed keys.
        data: what the user passed.
        what: the word before "key" in the error (``"config"``, ``"distillation"``); the ``TypeError`` names
            the whole ``"config"`` or ``"<what> config"``.

    Raises:
        TypeError: ``data`` is not a mapping.
        ValueError: a key that is not a field, with the closest field or the list of allowed keys.
    """
    if not isinstance(data, Mapping):
        name = what if what == "config" else f"{what} config"
        raise TypeError(f"{name} must be a dict, got {type(data).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            hint = difflib.get_close_matches(str(key), names, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f"; allowed keys: {', '.join(names)}"
            raise ValueError(f"unknown {what} key {key!r}{extra}")
    return dict(data)


class ConfigBase:
    """Base of a config dataclass: built from a dict, a YAML file or itself, exported as a plain dict.

    A subclass names itself in its errors with three class attributes:

    * ``KEY_WORD``: the word before "key" in the unknown-key ``ValueError`` (``"config"``);
    * ``PARAMETER``: the parameter named by ``coerce``'s ``TypeError`` (``"config"``);
    * ``YAML_SECTION``: a top-level YAML key whose mapping ``from_yaml`` unwraps (``None``: none besides
      ``pruning:``, which :func:`sparsify.yaml_io.load_yaml_mapping` always unwraps).
    """

    KEY_WORD: ClassVar[str] = "config"
    PARAMETER: ClassVar[str] = "config"
    YAML_SECTION: ClassVar[str | None] = None

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build from a dict; unknown keys raise ``ValueError`` with a "did you mean" hint.

        Example:
            >>> from sparsify import PruningConfig
            >>> PruningConfig.from_dict({"target_sparsty": 0.5})
            Traceback (most recent call last):
            ...
            ValueError: unknown config key 'target_sparsty' (did you mean 'target_sparsity'?)
        """
        return cls(**checked_fields(cls, data, cls.KEY_WORD))

    @classmethod
    def from_yaml(cls: type[C], path: str | os.PathLike) -> C:
        """Load from a YAML file (safe loading; ``pattern: 2:4`` may stay unquoted).

        A top-level ``pruning:`` key is accepted, and the class's ``YAML_SECTION`` (``distillation:``).
        """
        from .yaml_io import load_yaml_mapping    # PyYAML loads only when a YAML file is read
        data = load_yaml_mapping(path)
        section = cls.YAML_SECTION
        if section is not None and set(data) == {section} and isinstance(data[section], Mapping):
            data = data[section]
        return cls.from_dict(data)

    @classmethod
    def coerce(cls: type[C], config: Any) -> C:
        """Accept an instance of the class, a dict or a YAML path.

        Example:
            >>> from sparsify import PruningConfig
            >>> PruningConfig.coerce({"pattern": "4x1"}).pattern
            '4x1'
            >>> PruningConfig.coerce(0.5)
            Traceback (most recent call last):
            ...
            TypeError: config must be a PruningConfig, a dict or a YAML file path, got float
        """
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            return cls.from_dict(config)
        if isinstance(config, (str, os.PathLike)):
            return cls.from_yaml(config)
        raise TypeError(f"{cls.PARAMETER} must be a {cls.__name__}, a dict or a YAML file path, "
                        f"got {type(config).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (lists copied) that ``from_dict`` turns back into an equal config."""
        return dataclasses.asdict(self)   # type: ignore[call-overload]
