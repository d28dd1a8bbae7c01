"""One validated configuration for every pruning setting.

Every field is checked at construction; a bad value raises ``ValueError``
(or ``TypeError`` for a wrong type) naming the field, the value and what is
allowed. Loadable from a dict or a YAML file and round-trips to a dict.

Example:
    >>> cfg = PruningConfig(target_sparsity=0.9, pattern="4x1", end_step=1000)
    >>> PruningConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> PruningConfig(target_sparsity=1.2)
    Traceback (most recent call last):
    ...
    ValueError: target_sparsity must be in [0, 1), got 1.2
"""
from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field
from typing import Any

from .criteria import registered_criteria
from .patterns import BLOCK_REDUCTIONS, get_pattern
from .threads import check_threads
from .schedules import Schedule, ScheduleSettings, build_schedule, registered_schedules, schedule_kind
from .config_base import ConfigBase

__all__ = ["PruningConfig", "SCOPES", "REGROWTH", "PRUNED_GRADIENTS", "SCHEDULE_TYPES", "DEFAULT_TARGET_SPARSITY", "default_target_sparsity",
           "yaml_loader", "load_yaml_mapping"]

SCOPES = ("global", "local", "row", "erk")
REGROWTH = ("none", "rigl", "set")
PRUNED_GRADIENTS = ("none", "straight_through")


def __getattr__(name: str) -> Any:
    # SCHEDULE_TYPES: the registered schedule kinds now (a kind registered later shows up too)
    if name == "SCHEDULE_TYPES":
        return registered_schedules()
    # yaml_loader, load_yaml_mapping: re-exported from sparsify.yaml_io, loaded on first use (no PyYAML at import)
    if name in ("yaml_loader", "load_yaml_mapping"):
        from . import yaml_io
        return getattr(yaml_io, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The target sparsity when a config gives none (lowered to a pattern's maximum, e.g. N/M for "N:M").
DEFAULT_TARGET_SPARSITY = 0.9


def default_target_sparsity(pattern: Any = "1x1") -> float:
    """The target when none is given: 0.9, or the pattern's maximum if lower (N/M for ``"N:M"``).

    One rule for the API, YAML files and the command line.

    Example:
        >>> default_target_sparsity("4x1"), default_target_sparsity("2:4"), default_target_sparsity("1:4")
        (0.9, 0.5, 0.25)
    """
    return min(DEFAULT_TARGET_SPARSITY, float(get_pattern(pattern).max_ratio))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class PruningConfig(ConfigBase):
    """Every pruning setting, validated at construction.

    Attributes:
        target_sparsity: final fraction of pruned weights, in [0, 1) (at most N/M for ``"N:M"``);
            default 0.9, or the pattern's maximum if lower (0.5 for ``"2:4"``).
        pattern: ``"1x1"`` (unstructured); ``"NxM"`` blocks of N rows by M
            columns of the 2-D view ``(out, kernel * in)``; ``"channelxM"``
            all rows by M columns (``"channelx1"`` prunes input columns);
            ``"Nxchannel"`` N rows by all columns (``"1xchannel"`` prunes output
            channels); ``"N:M"`` N pruned of every M consecutive weights along
            the last axis (``"2:4"`` keeps 2 of 4, which is NVIDIA's "2:4
            sparsity").
        pruning_scope: ``"local"`` (every layer the same ratio), ``"global"``
            (one threshold over all layers), ``"row"`` (every output row of every
            layer the same ratio, as Wanda compares weights; pattern ``"1x1"``) or
            ``"erk"`` (each layer's ratio from its shape, Erdős–Rényi-Kernel as in
            RigL: small layers stay denser, the total is exact; pattern ``"1x1"``).
        start_step, end_step: schedule window (optimizer steps).
        pruning_frequency: steps between mask updates (<= 0: every step).
        sparsity_decay_type: the schedule from ``init_sparsity`` i to
            ``target_sparsity`` t, p the fraction of the window done:
            ``"gradual"`` i + (t-i)(1 - (1-p)^exponent) (the seed's
            polynomial); ``"constant"`` t from ``start_step`` (``end_step``
            may be -1); Intel Neural Compressor's ``"linear"`` i + (t-i)p,
            ``"exp"`` 1 - (1-i)((1-t)/(1-i))^p, ``"cos"`` i + (t-i)(1 -
            cos(p pi/2)), ``"cube"`` i + (t-i)p^3.
        init_sparsity: sparsity at ``start_step``.
        exponent: exponent of the gradual schedule.
        leave_enabled: keep masking after ``end_step``.
        max_sparsity_ratio_per_layer, min_sparsity_ratio_per_layer: per-layer clamps.
        op_names: regexes (``re.search``) selecting weights by name.
        excluded_op_names: regexes removing weights from the selection.
        criterion: a registered criterion (:mod:`sparsify.criteria`): ``"magnitude"``,
            ``"snip"``, ``"snip_momentum"``, ``"wanda"`` (``|w|`` times the input channel's
            activation norm) or one registered with ``register_criterion``.
        criterion_momentum: averaging factor of ``snip_momentum``.
        block_score_reduce: how a block scores its elements: sum, mean or max.
        skip_incompatible_layers: leave layers the pattern does not fit dense
            instead of raising (a warning names them; ``sparsity()`` shows None).
        monotone: pruned weights stay pruned (new masks are subsets of old, except
            where regrowth grows them). ``False``: every update ranks all weights, pruned
            ones by the values they keep under the mask, so a pruned weight can come back.
        regrowth: ``"none"``; ``"rigl"`` (RigL, Evci et al. 2020) or ``"set"`` (SET): at
            every update before ``end_step``, after the scheduled sparsity, a fraction of
            the kept weights with the lowest scores is dropped and as many pruned ones
            are grown: those with the largest gradient magnitude (RigL) or at random
            (SET). Grown weights start at zero with zeroed optimizer state. Pattern
            ``"1x1"``; not with ``pruning_scope="row"``.
        regrowth_fraction: the fraction of kept weights replaced at ``start_step``; it
            decays along a cosine to 0 at ``end_step``.
        pruned_gradient: what a pruned weight's stored value receives in training:
            ``"none"`` (no gradient: it keeps its value, as in torch.ao) or
            ``"straight_through"`` (the dense gradient, as in straight-through /
            dense-to-sparse training; PyTorch and Keras 3: TF graph mode, the seed API
            and tf-keras refuse it).
        pruned_decay: SR-STE's sparse-refined term (Zhou et al. 2021), >= 0: with
            ``pruned_gradient="straight_through"`` the gradient of a pruned weight ``w`` becomes
            ``g + pruned_decay * w`` (a decay on the pruned entries only, added to the gradient of
            every backward pass, so the optimizer sees it). 0 (the default) adds nothing; a nonzero
            value needs ``"straight_through"``. SR-STE in one line: ``pattern="2:4",
            pruned_gradient="straight_through", pruned_decay=2e-4, pruning_frequency=1, monotone=False``
            (2e-4 is the paper's value with SGD; tune it: with Adam on the MNIST-1D benchmark 6e-4 was best).
        num_threads: threads of a mask update (layers side by side, large layers in chunks; the masks
            are the same for any count). None (the default): the environment variable
            ``SPARSIFY_NUM_THREADS``, else the cores this process may run on.

    Example:
        >>> PruningConfig(pattern="2:4", target_sparsity=0.5).pattern_obj().N
        2
    """

    target_sparsity: float | None = None
    pattern: str = "1x1"
    pruning_scope: str = "local"
    start_step: int = 0
    end_step: int = 1000
    pruning_frequency: int = 100
    sparsity_decay_type: str = "gradual"
    init_sparsity: float = 0.0
    exponent: float = 3.0
    leave_enabled: bool = True
    max_sparsity_ratio_per_layer: float = 0.98
    min_sparsity_ratio_per_layer: float = 0.0
    op_names: list[str] = field(default_factory=lambda: [".*"])
    excluded_op_names: list[str] = field(default_factory=list)
    criterion: str = "magnitude"
    criterion_momentum: float = 0.9
    block_score_reduce: str = "sum"
    skip_incompatible_layers: bool = False
    monotone: bool = True
    regrowth: str = "none"
    regrowth_fraction: float = 0.3
    pruned_gradient: str = "none"
    pruned_decay: float = 0.0
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise TypeError(f"pattern must be a string such as '1x1', '4x1', '1xchannel' or '2:4', got {self.pattern!r}")
        try:
            pat = get_pattern(self.pattern)
        except ValueError as e:
            raise ValueError(f"pattern: {e}") from None
        if self.target_sparsity is None:
            self.target_sparsity = default_target_sparsity(pat)
        for name in ("target_sparsity", "init_sparsity", "max_sparsity_ratio_per_layer",
                     "min_sparsity_ratio_per_layer", "criterion_momentum", "regrowth_fraction"):
            self._ratio(name)
        for name in ("start_step", "end_step", "pruning_frequency"):
            v = getattr(self, name)
            if not _is_int(v):
                raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
            if not -(2 ** 62) <= v < 2 ** 62:     # steps are int64 in every framework, with room to add
                raise ValueError(f"{name} must be in [-2**62, 2**62) (steps are 64-bit integers), got {v}")
        if self.start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {self.start_step}")
        kind = schedule_kind(self.sparsity_decay_type, "sparsity_decay_type")
        if self.end_step < self.start_step and not (self.end_step == -1 and kind.open_end):
            raise ValueError(f"end_step must be >= start_step ({self.start_step}), got {self.end_step}")
        self._choice("pruning_scope", SCOPES)
        self._choice("criterion", registered_criteria())
        self._choice("regrowth", REGROWTH)
        self._choice("pruned_gradient", PRUNED_GRADIENTS)
        self._choice("block_score_reduce", BLOCK_REDUCTIONS)
        self._pruned_decay()
        if self.num_threads is not None:
            check_threads(self.num_threads, "num_threads")
        if not _is_num(self.exponent) or not math.isfinite(self.exponent) or self.exponent <= 0:
            raise ValueError(f"exponent must be a positive number, got {self.exponent!r}")
        for name in ("leave_enabled", "skip_incompatible_layers", "monotone"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("op_names", "excluded_op_names"):
            self._regex_list(name)
        if self.min_sparsity_ratio_per_layer > self.max_sparsity_ratio_per_layer:
            raise ValueError(f"min_sparsity_ratio_per_layer ({self.min_sparsity_ratio_per_layer}) must be <= "
                             f"max_sparsity_ratio_per_layer ({self.max_sparsity_ratio_per_layer})")
        if self.init_sparsity > self.target_sparsity:
            raise ValueError(f"init_sparsity ({self.init_sparsity}) must be <= target_sparsity ({self.target_sparsity})")
        pat.check_ratio(self.target_sparsity, "target_sparsity")      # e.g. at most N/M for "N:M"
        for what, active in (("pruning_scope='row'", self.pruning_scope == "row"),
                             ("pruning_scope='erk'", self.pruning_scope == "erk"),
                             (f"regrowth={self.regrowth!r}", self.regrowth != "none")):
            if active and self.pattern != "1x1":
                raise ValueError(f"{what} works on single weights: pattern must be '1x1', got {self.pattern!r}")
        if self.regrowth != "none" and self.pruning_scope == "row":
            raise ValueError(f"regrowth={self.regrowth!r} swaps weights between the rows of a layer, which "
                             "pruning_scope='row' keeps at one ratio each: use pruning_scope 'local', 'global' or "
                             "'erk' with regrowth, or regrowth='none' with 'row'")
        if self.regrowth != "none" and self.end_step < 0:
            raise ValueError(f"regrowth={self.regrowth!r} decays its fraction to 0 at end_step: end_step must be "
                             f">= 0, got {self.end_step}")

    # ----- validation helpers ----------------------------------------------------------
    def _ratio(self, name: str) -> None:
        v = getattr(self, name)
        if not _is_num(v):
            raise TypeError(f"{name} must be a number in [0, 1), got {v!r} ({type(v).__name__})")
        if math.isnan(v) or not 0.0 <= v < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {v!r}")
        setattr(self, name, float(v))

    def _pruned_decay(self) -> None:
        v = self.pruned_decay
        if not _is_num(v):
            raise TypeError(f"pruned_decay must be a number >= 0, got {v!r} ({type(v).__name__})")
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"pruned_decay must be a finite number >= 0, got {v!r}")
        if v != 0 and self.pruned_gradient != "straight_through":
            raise ValueError(f"pruned_decay={v!r} decays the pruned weights through their gradient, which only "
                             f"pruned_gradient='straight_through' gives them (got pruned_gradient="
                             f"{self.pruned_gradient!r}): set pruned_gradient='straight_through', or pruned_decay=0")
        self.pruned_decay = float(v)

    def _choice(self, name: str, allowed: tuple[str, ...]) -> None:
        v = getattr(self, name)
        if v not in allowed:
            hint = difflib.get_close_matches(str(v), allowed, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(f"{name} must be one of {allowed}, got {v!r}{extra}")

    def _regex_list(self, name: str) -> None:
        import re

        v = getattr(self, name)
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise TypeError(f"{name} must be a list of regular expressions (strings), got {v!r}")
        for rx in v:
            try:
                re.compile(rx)
            except re.error as e:
                raise ValueError(f"{name} holds an invalid regular expression {rx!r}: {e}") from None
        setattr(self, name, list(v))

    # ----- construction / export (from_dict, from_yaml, coerce, to_dict: ConfigBase) ---
    def to_yaml(self, path: str | os.PathLike) -> None:
        """Write the config as YAML."""
        import yaml

        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(self.to_dict(), fh, sort_keys=False)

    def replace(self, **changes: Any) -> "PruningConfig":
        """A validated copy with ``changes`` applied."""
        return type(self).from_dict({**self.to_dict(), **changes})

    def oneshot(self) -> "PruningConfig":
        """This config pruning straight to ``target_sparsity`` at step 0, with no schedule window and no
        regrowth: what the one-shot entry points (``prune_oneshot``) use. The default window would give
        a target of 0 at step 0.

        Example:
            >>> cfg = PruningConfig(target_sparsity=0.5, start_step=100, end_step=1000).oneshot()
            >>> cfg.start_step, cfg.end_step, float(cfg.schedule().sparsity(0))
            (0, 0, 0.5)
        """
        return self.replace(start_step=0, end_step=0, init_sparsity=0.0, sparsity_decay_type="gradual",
                            regrowth="none", leave_enabled=True)

    # ----- derived objects -------------------------------------------------------------
    def schedule(self) -> Schedule:
        """The schedule this config describes (``sparsity_decay_type`` from the schedule registry).

        Example:
            >>> float(PruningConfig(sparsity_decay_type="cube", target_sparsity=0.8, end_step=100).schedule().sparsity(50))
            0.1
        """
        return build_schedule(self.sparsity_decay_type, ScheduleSettings(
            init_sparsity=self.init_sparsity, final_sparsity=self.target_sparsity, begin_step=self.start_step,
            end_step=self.end_step, update_frequency=self.pruning_frequency, exponent=self.exponent,
            leave_enabled=self.leave_enabled))

    def pattern_obj(self):
        """The :class:`~sparsify.patterns.Pattern` this config describes."""
        return get_pattern(self)
