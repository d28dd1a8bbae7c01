"""Schedule kinds by name: one registry that the config, ``get_schedule`` and the docs read.

A schedule kind registers a builder that turns the common settings
(:class:`ScheduleSettings`) into a :class:`~sparsify.schedules.base.Schedule`,
with a one-line formula for the config reference. ``PruningConfig``'s
``sparsity_decay_type`` accepts exactly the registered names.

Example:
    >>> import sparsify.schedules
    >>> registered_schedules()
    ('gradual', 'constant', 'linear', 'exp', 'cos', 'cube')
    >>> float(build_schedule("linear", ScheduleSettings(0.0, 0.8, 0, 10, 1)).sparsity(5))
    0.4
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .base import Schedule

__all__ = [
    "ScheduleSettings", "ScheduleKind", "register_schedule", "unregister_schedule", "registered_schedules", "schedule_kind",
    "schedule_name_hint", "build_schedule", "get_schedule",
]


@dataclass(frozen=True)
class ScheduleSettings:
    """The settings every schedule kind is built from (``PruningConfig`` names in brackets).

    Attributes:
        init_sparsity: sparsity at ``begin_step`` (``init_sparsity``).
        final_sparsity: sparsity at and after ``end_step`` (``target_sparsity``).
        begin_step: first step of the window (``start_step``).
        end_step: last step of the window, -1 for none where the kind allows it (``end_step``).
        update_frequency: steps between mask updates, <= 0 for every step (``pruning_frequency``).
        exponent: exponent of polynomial kinds (``exponent``).
        leave_enabled: keep masking after ``end_step`` (``leave_enabled``).
    """

    init_sparsity: float = 0.0
    final_sparsity: float = 0.9
    begin_step: int = 0
    end_step: int = -1
    update_frequency: int = 100
    exponent: float = 3.0
    leave_enabled: bool = True


@dataclass(frozen=True)
class ScheduleKind:
    """A registered schedule kind.

    Attributes:
        name: the ``sparsity_decay_type`` / ``type`` value.
        build: ``ScheduleSettings -> Schedule``.
        formula: one line for the config reference (i = init, t = final,
            p = fraction of the window done).
        open_end: True if ``end_step = -1`` (never ends) is allowed.
    """

    name: str
    build: Callable[[ScheduleSettings], Schedule]
    formula: str
    open_end: bool = False


_KINDS: dict[str, ScheduleKind] = {}


def register_schedule(name: str, *, formula: str, open_end: bool = False
                      ) -> Callable[[Callable[[ScheduleSettings], Schedule]], Callable[[ScheduleSettings], Schedule]]:
    """Decorator registering ``build(settings) -> Schedule`` under ``name``.

    Example:
        >>> from sparsify.schedules import ConstantSchedule
        >>> @register_schedule("half-now", formula="0.5 from start_step", open_end=True)
        ... def half_now(s):
        ...     return ConstantSchedule(0.5, s.begin_step, s.end_step, s.update_frequency, s.leave_enabled)
        >>> float(build_schedule("half-now", ScheduleSettings(begin_step=2)).sparsity(3))
        0.5
        >>> unregister_schedule("half-now")
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"schedule name must be a non-empty string, got {name!r}")

    def wrap(build: Callable[[ScheduleSettings], Schedule]) -> Callable[[ScheduleSettings], Schedule]:
        if name in _KINDS and _KINDS[name].build is not build:
            raise ValueError(f"schedule name {name!r} is already registered")
        _KINDS[name] = ScheduleKind(name, build, formula, open_end)
        return build
    return wrap


def unregister_schedule(name: str) -> None:
    """Remove a registered kind (tests and experiments); ``ValueError`` if it is not registered."""
    schedule_kind(name)
    del _KINDS[name]


def registered_schedules() -> tuple[str, ...]:
    """Names of the registered schedule kinds, in registration order."""
    return tuple(_KINDS)


def schedule_kind(name: str, what: str = "schedule type") -> ScheduleKind:
    """The registered kind ``name``; ``ValueError`` naming ``what`` and the allowed names otherwise.

    Example:
        >>> schedule_kind("constant").open_end
        True
        >>> schedule_kind("cosine", "sparsity_decay_type")
        Traceback (most recent call last):
        ...
        ValueError: sparsity_decay_type must be one of ('gradual', 'constant', 'linear', 'exp', 'cos', 'cube'), got 'cosine' (did you mean 'cos'?)
    """
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        names = registered_schedules()
        raise ValueError(f"{what} must be one of {names}, got {name!r}{schedule_name_hint(name, names)}")
    return kind


#: Names peers give a curve we register under another name -> (our name, why).
_PEER_NAMES = {
    "cubic": ("gradual", "the cubic schedule of tfmot (PolynomialDecay, power=3) and torch.ao (CubicSL) is "
                         "'gradual': i + (t-i) * (1 - (1-p)^3), fast at first; 'cube' is i + (t-i) * p^3, slow at first"),
    "polynomial": ("gradual", "tfmot's PolynomialDecay is 'gradual' (its power is our exponent)"),
}
_PEER_ALIASES = {"cubicsl": "cubic", "cubic_sl": "cubic", "polynomialdecay": "polynomial",
                 "polynomial_decay": "polynomial", "poly": "polynomial"}


def schedule_name_hint(name: Any, names: tuple[str, ...]) -> str:
    """The " (did you mean ...?)" suffix for an unknown schedule name; "" when nothing fits.

    Peers' names for a curve registered here under another name lead to that curve
    (``cubic`` to ``gradual``, not to the look-alike ``cube``); other names get the
    closest registered spelling.

    Example:
        >>> schedule_name_hint("cosine", ("gradual", "cos"))
        " (did you mean 'cos'?)"
        >>> schedule_name_hint("CubicSL", ("gradual", "cube")).split(":")[0]
        " (did you mean 'gradual'? the cubic schedule of tfmot (PolynomialDecay, power=3) and torch.ao (CubicSL) is 'gradual'"
    """
    key = str(name).strip().lower().replace("-", "_")
    key = _PEER_ALIASES.get(key, key)
    if key in _PEER_NAMES and _PEER_NAMES[key][0] in names:
        ours, why = _PEER_NAMES[key]
        return f" (did you mean {ours!r}? {why})"
    hint = difflib.get_close_matches(str(name), names, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def build_schedule(name: str, settings: ScheduleSettings) -> Schedule:
    """Build the registered kind ``name`` from ``settings``.

    Raises:
        ValueError: unknown name, or ``end_step = -1`` for a kind that needs an end.
    """
    kind = schedule_kind(name)
    if settings.end_step == -1 and not kind.open_end:
        raise ValueError(f"schedule type {name!r} needs end_step")
    return kind.build(settings)


_KEYS = {
    "init_sparsity": ("init_sparsity",),
    "final_sparsity": ("final_sparsity", "target_sparsity"),
    "begin_step": ("begin_step", "start_step"),
    "end_step": ("end_step",),
    "update_frequency": ("update_frequency", "pruning_frequency"),
    "exponent": ("exponent",),
    "leave_enabled": ("leave_enabled",),
}


def get_schedule(config: Mapping[str, Any] | Any) -> Schedule:
    """Build a schedule from a dict (or a ``PruningConfig``).

    Dict keys: ``type`` (or ``sparsity_decay_type``; ``"gradual"`` by default,
    any of :func:`registered_schedules`), ``init_sparsity``, ``final_sparsity``
    (or ``target_sparsity``), ``begin_step`` (or ``start_step``), ``end_step``,
    ``update_frequency`` (or ``pruning_frequency``), ``exponent``,
    ``leave_enabled``.

    Example:
        >>> get_schedule({"type": "cos", "final_sparsity": 0.5, "begin_step": 0, "end_step": 4,
        ...               "update_frequency": 1}).sparsity(2).round(6).item()
        0.146447
    """
    if hasattr(config, "schedule") and callable(config.schedule):      # a PruningConfig
        return config.schedule()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict or PruningConfig, got {type(config).__name__}")
    c = dict(config)
    kind = c.pop("type", c.pop("sparsity_decay_type", "gradual"))
    values: dict[str, Any] = {}
    for field, aliases in _KEYS.items():
        for alias in aliases:
            if alias in c:
                values.setdefault(field, c.pop(alias))
    if c:
        allowed = ", ".join(["type", *(a for aliases in _KEYS.values() for a in aliases)])
        raise ValueError(f"unknown schedule keys {sorted(c)}; allowed: {allowed}")
    if "final_sparsity" not in values:
        raise ValueError("schedule needs final_sparsity (or target_sparsity)")
    return build_schedule(kind, ScheduleSettings(**values))
