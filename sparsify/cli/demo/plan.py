"""What ``sparsify demo`` runs: its default config, a config's schedule fitted into ``--steps``, the
classifier kept dense under a pattern that removes whole rows, and the teacher when it distills.

Example:
    >>> cfg, note = plan_config(default_config(pattern="4x1", steps=30), prune_classifier=False)
    >>> cfg.end_step, cfg.excluded_op_names, note
    (20, [], '')
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig
from sparsify.patterns import get_pattern

from .common import LAYERS, SIZES

__all__ = ["DEFAULT_STEPS", "CLASSIFIER", "CLASSIFIER_REGEX", "SHAPES", "DISTILLING_FRAMEWORKS", "default_config",
           "fit_schedule_into", "removes_rows", "plan_config", "demo_distillation"]

DEFAULT_STEPS = 300
#: The demo's classifier (output) layer, and the regex that excludes it in every framework's weight names.
CLASSIFIER = LAYERS[-1]
CLASSIFIER_REGEX = rf"^{CLASSIFIER}[./]"
#: Canonical (out, in) shape of each demo layer.
SHAPES: dict[str, tuple[int, int]] = {name: (SIZES[i + 1], SIZES[i]) for i, name in enumerate(LAYERS)}
#: the demo's frameworks that distill (the TF graph demo's graph has no teacher network)
DISTILLING_FRAMEWORKS = ("torch", "keras", "tf-keras")


def default_config(pattern: str = "1x1", sparsity: float | None = None, steps: int | None = None) -> PruningConfig:
    """The demo's schedule: gradual from step 0 to 2/3 of ``steps``, ten mask updates.

    ``sparsity`` defaults to the config's rule
    (:func:`sparsify.config.default_target_sparsity`: 0.9, or N/M for ``"N:M"``).
    Layers the pattern does not fit (e.g. ``"4x1"`` on
    the 10-class output layer) are left dense (``skip_incompatible_layers``).

    Example:
        >>> default_config(steps=300).to_dict()["end_step"], default_config("1:4").target_sparsity
        (200, 0.25)
    """
    steps = DEFAULT_STEPS if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    end = max(1, (2 * steps) // 3)
    return PruningConfig(target_sparsity=sparsity, pattern=pattern, start_step=0, end_step=end,
                         pruning_frequency=max(1, end // 10), skip_incompatible_layers=True)


def fit_schedule_into(config: PruningConfig, steps: int) -> tuple[PruningConfig, str]:
    """Scale a config's schedule so it ends at 2/3 of ``steps`` (as the demo's own); returns it and a note.

    ``start_step``, ``end_step`` and ``pruning_frequency`` are scaled by the
    same factor; a schedule that already ends by then is returned unchanged.

    Example:
        >>> cfg, note = fit_schedule_into(PruningConfig(start_step=100, end_step=1000, pruning_frequency=100), 300)
        >>> (cfg.start_step, cfg.end_step, cfg.pruning_frequency), note
        ((20, 200, 20), 'schedule fitted into --steps 300: start_step 100 -> 20, end_step 1000 -> 200, pruning_frequency 100 -> 20')
    """
    end = max(1, (2 * steps) // 3)
    if config.end_step < 0 or config.end_step <= end:
        return config, f"schedule already fits into --steps {steps} (end_step {config.end_step}): left as it is"
    f = end / config.end_step
    start = int(round(config.start_step * f))
    freq = config.pruning_frequency if config.pruning_frequency <= 0 else max(1, int(round(config.pruning_frequency * f)))
    new = config.replace(start_step=start, end_step=max(start, end), pruning_frequency=freq)
    return new, (f"schedule fitted into --steps {steps}: start_step {config.start_step} -> {new.start_step}, "
                 f"end_step {config.end_step} -> {new.end_step}, pruning_frequency {config.pruning_frequency} -> "
                 f"{new.pruning_frequency}")


def removes_rows(pattern: Any, shape2d: tuple[int, int]) -> bool:
    """Does ``pattern`` prune whole rows (output channels) of a weight whose 2-D view is ``shape2d``?

    Asked of the pattern itself (its block for that shape spans every column),
    so it holds whatever the pattern is called.

    Example:
        >>> [removes_rows(p, (10, 64)) for p in ("1x1", "4x1", "2:4")]
        [False, False, False]
    """
    pat = get_pattern(pattern)
    if pat.fits(tuple(shape2d)) is not None:
        return False
    rows, cols = pat.get_block_size_dict({"w": np.zeros(shape2d, np.float32)})["w"]
    return cols == shape2d[1] and shape2d[1] > 1


def plan_config(cfg: PruningConfig, prune_classifier: bool) -> tuple[PruningConfig, str]:
    """The config the demo runs (classifier rows protected unless asked) and the note saying so.

    Raises ``ValueError`` if the pattern fits none of the layers it would prune.

    Example:
        >>> cfg, note = plan_config(default_config(pattern="1xchannel"), prune_classifier=False)
        >>> cfg.excluded_op_names, note[:45]
        (['^out[./]'], 'dense: 1xchannel prunes whole output rows, an')
    """
    note = ""
    if not prune_classifier and removes_rows(cfg.pattern, SHAPES[CLASSIFIER]) and \
            CLASSIFIER_REGEX not in cfg.excluded_op_names:
        cfg = cfg.replace(excluded_op_names=[*cfg.excluded_op_names, CLASSIFIER_REGEX])
        note = (f"dense: {cfg.pattern} prunes whole output rows, and each of the {SHAPES[CLASSIFIER][0]} rows of the "
                f"classifier is a class; left dense (--prune-classifier prunes it too)")
    pat = cfg.pattern_obj()
    fitting = [n for n in LAYERS if pat.fits(SHAPES[n]) is None and
               not (note and n == CLASSIFIER)]
    if not fitting:
        shapes = ", ".join(f"{n} {SHAPES[n][0]}x{SHAPES[n][1]}" for n in LAYERS)
        raise ValueError(f"pattern {cfg.pattern!r} fits none of the demo's layers ({shapes}; 2-D views out x in): "
                         "nothing would be pruned; choose a pattern such as 1x1, 4x1 or 2:4")
    return cfg, note


def demo_distillation(framework: str, distillation: Any) -> dict[str, DistillationConfig]:
    """The backend's ``distillation`` keyword (none without one); refuses a framework that cannot distill.

    Example:
        >>> demo_distillation("torch", None), demo_distillation("torch", {"temperature": 4})["distillation"].temperature
        ({}, 4.0)
    """
    if distillation is None:
        return {}
    if framework not in DISTILLING_FRAMEWORKS:
        raise ValueError(f"distillation: the {framework!r} demo does not distill; use a framework of "
                         f"{DISTILLING_FRAMEWORKS} (in your own TF graph, sparsify_tf.distillation_loss adds the term)")
    cfg = DistillationConfig.coerce(distillation)
    if cfg.features or cfg.teacher != "dense_at_start":
        raise ValueError(f"distillation: the demo's teacher is its dense model and it matches logits only; "
                         f"got teacher={cfg.teacher!r}, features={list(cfg.features)!r}")
    return {"distillation": cfg}
