"""The keys of a config dict checked against a dataclass's fields, with a "did you mean" hint: the one check
behind :meth:`sparsify.PruningConfig.from_dict` and :meth:`sparsify.DistillationConfig.from_dict`.

Example:
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Settings:
    ...     temperature: float = 1.0
    >>> checked_fields(Settings, {"temprature": 2}, "settings")
    Traceback (most recent call last):
    ...
    ValueError: unknown settings key 'temprature' (did you mean 'temperature'?)
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping

__all__ = ["checked_fields"]


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
