"""``sparsify demo``: train a small MLP on the 8x8 digits, dense and with gradual pruning.

Four backends share one model (``64 -> 128 -> 64 -> 10``), data split and
schedule: ``"tf-graph"`` (``tf.compat.v1`` graph mode through
``sparsify_tf``), ``"keras"`` (Keras 3 on whatever backend is installed,
``sparsify_keras.PruningCallback``), ``"tf-keras"`` (tf-keras,
``sparsify_tf.keras.PruningCallback``) and ``"torch"``
(``sparsify_torch.prune``). A backend imports its framework when it runs,
so ``sparsify demo --framework torch`` never loads TensorFlow, and the data
ships with the package (:mod:`.data`, NumPy only): each backend needs only
its framework's extra.
``print(format_result(run_demo("torch", cfg, steps=100)))`` is what
``sparsify demo --framework torch --steps 100`` prints.

Example:
    >>> from sparsify.cli.demo import default_config
    >>> cfg = default_config(pattern="2:4", steps=100)
    >>> (cfg.target_sparsity, cfg.start_step, cfg.end_step, cfg.pruning_frequency)
    (0.5, 0, 66, 6)
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig
from sparsify.engine import PruningEngine
from sparsify.extras import install_command
from sparsify.layout import to_2d
from sparsify.patterns import get_pattern
from sparsify.target_check import TargetNotReachedWarning

from .. import interrupts
from ..atomic import MANIFEST, OutputError, RunDirectory
from ..frameworks import installed
from ..plots import plot_layer_sparsity, plot_mask, plot_schedule
from . import keras_backend, tf_graph, torch_backend
from .common import LAYERS, SIZES, BackendRun, DemoProgress, writing
from .data import load_digits_split

__all__ = ["FRAMEWORKS", "DEFAULT_STEPS", "CLASSIFIER", "MAX_SEED", "default_config",
           "fit_schedule_into", "removes_rows", "demo_outputs", "default_framework", "run_demo", "format_result",
           "DemoResult", "LayerResult"]

#: ``--framework`` name -> backend (a module or object with ``IMPORT_FRAMEWORK``, ``OUTPUTS`` and ``train``,
#: which imports the framework when called).
FRAMEWORKS: dict[str, Any] = {"tf-graph": tf_graph, "keras": keras_backend.KERAS, "tf-keras": keras_backend.TF_KERAS,
                              "torch": torch_backend}
DEFAULT_STEPS = 300
#: The demo's classifier (output) layer, and the regex that excludes it in every framework's weight names.
CLASSIFIER = LAYERS[-1]
CLASSIFIER_REGEX = rf"^{CLASSIFIER}[./]"
#: Largest ``seed`` (NumPy, torch and TensorFlow all take a 32-bit seed).
MAX_SEED = 2 ** 32 - 1
#: Canonical (out, in) shape of each demo layer.
SHAPES: dict[str, tuple[int, int]] = {name: (SIZES[i + 1], SIZES[i]) for i, name in enumerate(LAYERS)}


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


def demo_outputs(framework: str, plots: bool = True) -> list[str]:
    """Top-level names a demo run of ``framework`` writes into its output directory.

    Example:
        >>> demo_outputs("torch")[:3]
        ['config.yaml', 'summary.json', 'model.pt']
    """
    names = ["config.yaml", "summary.json", *FRAMEWORKS[framework].OUTPUTS]
    if plots:
        names += ["schedule.png", "layer_sparsity.png", *(f"mask_{n}.png" for n in LAYERS)]
    return names


@dataclass
class LayerResult:
    """One row of the demo's table."""

    name: str
    shape: tuple[int, ...]
    target: float | None          # None: left dense (pattern does not fit, excluded) or global scope
    achieved: float
    kept: int
    total: int
    exact: bool | None            # pruned count == the core's exact count for the target (None: not checkable)
    note: str = ""


@dataclass
class DemoResult:
    """Everything the demo measured."""

    framework: str
    config: PruningConfig
    steps: int
    target: float
    layers: list[LayerResult]
    dense_accuracy: float
    pruned_accuracy: float
    seconds: float
    total_exact: bool
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> tuple[int, int]:
        """(kept, total) over the pruned layers."""
        ls = [r for r in self.layers if r.target is not None or r.note == "global scope"]
        return sum(r.kept for r in ls), sum(r.total for r in ls)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary."""
        kept, total = self.total
        return {"framework": self.framework, "config": self.config.to_dict(), "steps": self.steps,
                "target": self.target, "layers": [dict(asdict(r), shape=list(r.shape)) for r in self.layers],
                "total_kept": kept, "total_weights": total, "total_exact": self.total_exact,
                "dense_accuracy": self.dense_accuracy, "pruned_accuracy": self.pruned_accuracy,
                "seconds": self.seconds, "files": self.files, "notes": self.notes}


def _layer_results(cfg: PruningConfig, target: float, weights: dict[str, np.ndarray], pruned: list[str],
                   excluded_note: str) -> tuple[list[LayerResult], bool]:
    pat = cfg.pattern_obj()
    # the exact counts the core prescribes for these shapes at this target (scores all equal)
    pruned = [n for n in pruned if pat.fits(to_2d(weights[n]).shape) is None]    # skip_incompatible_layers
    dummy = {n: np.ones(weights[n].shape, np.float32) for n in pruned}
    expected = {n: int((~m).sum()) for n, m in pat.get_masks(dummy, target).items()} if dummy else {}
    rows = []
    for n in LAYERS:
        w = weights[n]
        kept = int(np.count_nonzero(w))
        pruned_count = w.size - kept
        if n not in pruned:
            reason = pat.fits(to_2d(w).shape)
            note = f"{SKIPPED}: {cfg.pattern} does not fit its 2-D view {to_2d(w).shape}, left dense" \
                if reason is not None \
                else (excluded_note if n == CLASSIFIER and excluded_note else "dense: not selected by op_names")
            rows.append(LayerResult(n, w.shape, None, pruned_count / w.size, kept, w.size, None, note))
        elif cfg.pruning_scope == "global":
            rows.append(LayerResult(n, w.shape, None, pruned_count / w.size, kept, w.size, None, "global scope"))
        else:
            rows.append(LayerResult(n, w.shape, expected[n] / w.size, pruned_count / w.size, kept, w.size,
                                    pruned_count == expected[n]))
    total_exact = sum(r.total - r.kept for r in rows if r.name in expected) == sum(expected.values())
    return rows, total_exact


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo \
            or (hi is not None and value > hi):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _plan(cfg: PruningConfig, prune_classifier: bool) -> tuple[PruningConfig, str]:
    """The config the demo runs (classifier rows protected unless asked) and the note saying so.

    Raises ``ValueError`` if the pattern fits none of the layers it would prune.
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


def default_framework(is_installed: Callable[[str], bool] = installed) -> str:
    """The framework a bare ``sparsify demo`` runs: the first installed of TensorFlow (``"tf-graph"``),
    PyTorch (``"torch"``) and Keras 3 on JAX (``"keras"``).

    Raises:
        ImportError: none is installed (names the extras that bring one).

    Example:
        >>> default_framework(lambda module: module in ("torch", "keras", "jax"))
        'torch'
        >>> default_framework(lambda module: module in ("keras", "jax"))
        'keras'
    """
    if is_installed("tensorflow"):
        return "tf-graph"
    if is_installed("torch"):
        return "torch"
    if is_installed("keras") and is_installed("jax"):
        return "keras"
    raise ImportError("sparsify demo needs TensorFlow, PyTorch or Keras 3 with JAX, and none is installed: "
                      f"{install_command('torch')} (or the extra tf or jax)")


def run_demo(framework: str | None = None, config: PruningConfig | dict | str | None = None,
             steps: int | None = None, out: str | os.PathLike | None = None, progress: bool = True, seed: int = 0,
             prune_classifier: bool = False, fit_schedule: bool = False,
             distillation: DistillationConfig | dict | str | None = None, backend: str | None = None) -> DemoResult:
    """Train dense, then prune, on the digits; optionally write model, config and plots to ``out``.

    Args:
        framework: ``"tf-graph"``, ``"keras"`` (Keras 3, any backend), ``"tf-keras"`` or ``"torch"``;
            None: the installed one (:func:`default_framework`; ``"keras"`` when ``backend`` is given).
        config: pruning config (default :func:`default_config` for ``steps``).
        steps: training steps per phase (dense, then pruning); default 300.
        out: directory for ``config.yaml``, ``summary.json``, the pruned model and
            PNG plots. They are committed together when the run ends
            (:class:`~sparsify.cli.atomic.RunDirectory`, manifest
            ``sparsify-run.json`` last): an interrupted run leaves the previous
            run in ``out`` as it was, and nothing sparsify did not write is replaced.
        progress: show the progress on stderr (a bar on a terminal, plain lines in a log:
            :class:`~sparsify.cli.demo.common.DemoProgress`).
        seed: seed of the data split, batches and initialisation, in [0, 2**32 - 1].
        prune_classifier: also prune the classifier's output rows with a
            pattern that removes whole rows (by default they stay dense: each
            row is a class).
        fit_schedule: scale the config's schedule into ``steps``
            (:func:`fit_schedule_into`); otherwise it runs as written, and the
            result says when it ends after the last step.
        distillation: a :class:`~sparsify.DistillationConfig` (or its dict): the dense model, frozen
            when pruning begins, teaches the pruned one (``"torch"``, ``"keras"`` and ``"tf-keras"``;
            in a TF graph add :func:`sparsify_tf.distillation_loss` to your own loss).
        backend: ``"keras"`` only: the Keras 3 backend (``"tensorflow"``, ``"jax"`` or ``"torch"``); None:
            ``KERAS_BACKEND``, else an installed ``keras.json`` backend, else the installed one
            (:func:`~sparsify.cli.demo.keras_backend.pick_keras_backend`).

    Raises:
        ValueError: unknown framework, bad config, steps or seed, a pattern that
            fits none of the layers, an ``out`` holding files sparsify did not write.
        ImportError: the framework is not installed (names the extra to install).
    """
    if framework is None:
        framework = "keras" if backend is not None else default_framework()
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {tuple(FRAMEWORKS)}, got {framework!r}")
    if backend is not None and framework != "keras":
        raise ValueError(f"backend applies to the 'keras' framework only (Keras 3), got backend={backend!r} with "
                         f"framework {framework!r}")
    if backend is not None and backend not in keras_backend.BACKEND_ORDER:
        raise ValueError(f"backend must be one of {keras_backend.BACKEND_ORDER}, got {backend!r}")
    if steps is not None:
        _check_int("steps", steps, 1)
    _check_int("seed", seed, 0, MAX_SEED)
    steps = DEFAULT_STEPS if steps is None else int(steps)
    cfg = default_config(steps=steps) if config is None else PruningConfig.coerce(config)
    distill = _distillation(framework, distillation)
    fit_note = ""
    if fit_schedule:
        cfg, fit_note = fit_schedule_into(cfg, steps)
    cfg, excluded_note = _plan(cfg, prune_classifier)
    run_dir = None
    plots = _have_matplotlib()
    if out is not None:
        run_dir = RunDirectory(out, planned=demo_outputs(framework, plots))   # refuses before any training
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if framework == "keras":
        keras_backend.choose_keras_backend(backend)     # sets KERAS_BACKEND before Keras is imported
    demo_backend = FRAMEWORKS[framework]
    demo_backend.IMPORT_FRAMEWORK()     # before the staging directory: an interrupt during a slow import is one
    interrupts.check()                  # of a run that has not started
    data = load_digits_split(int(seed))
    t0 = time.perf_counter()
    if run_dir is None:
        with DemoProgress(2 * steps, progress) as bar, _skips_in_table():
            run: BackendRun = demo_backend.train(cfg, data, steps, int(seed), bar, None, **distill)
        return _result(framework, cfg, steps, run, time.perf_counter() - t0, excluded_note, fit_note)
    try:
        with run_dir:                   # staging directory, removed on any error or interrupt
            with DemoProgress(2 * steps, progress) as bar, _skips_in_table():
                run = demo_backend.train(cfg, data, steps, int(seed), bar, run_dir.stage, **distill)
            res = _result(framework, cfg, steps, run, time.perf_counter() - t0, excluded_note, fit_note)
            with writing(run_dir.stage):
                _write_outputs(run_dir, res, run, plots)
            run_dir.commit({"command": "demo", "framework": framework, "pattern": cfg.pattern,
                            "target_sparsity": cfg.target_sparsity, "steps": steps, "seed": int(seed),
                            "distillation": distill["distillation"].to_dict() if distill else None})
    except OutputError as e:            # name the file where it would have gone, and what is left
        held = "the previous run" if run_dir.previous is not None else "nothing from this run"
        raise OutputError(e.errno, f"{(e.strerror or str(e)).replace(os.fspath(run_dir.stage), os.fspath(run_dir.out))}; "
                                   f"{os.fspath(run_dir.out)!r} still holds {held}") from None
    return res


#: the demo's frameworks that distill (the TF graph demo's graph has no teacher network)
DISTILLING_FRAMEWORKS = ("torch", "keras", "tf-keras")


def _distillation(framework: str, distillation: Any) -> dict[str, DistillationConfig]:
    """The backend's ``distillation`` keyword (none without one); refuses a framework that cannot distill."""
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


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _result(framework: str, cfg: PruningConfig, steps: int, run: BackendRun, seconds: float,
            excluded_note: str, fit_note: str = "") -> DemoResult:
    target = PruningEngine(cfg).target_sparsity(run.final_step)
    rows, total_exact = _layer_results(cfg, target, run.weights, run.pruned, excluded_note)
    notes = ([fit_note] if fit_note else []) + list(run.extra)
    if cfg.end_step > run.final_step:
        notes.append(f"end_step {cfg.end_step} comes after the last training step ({run.final_step}); "
                     f"the target shown is the schedule's sparsity at step {run.final_step} "
                     "(--fit-schedule fits a config's schedule into --steps)")
    drop = run.dense_accuracy - run.pruned_accuracy
    if drop > 0.2:
        notes.append(f"pruning cost {100 * drop:.1f} points of accuracy: try a lower --sparsity, another pattern "
                     "or more --steps")
    return DemoResult(framework, cfg, steps, target, rows, run.dense_accuracy, run.pruned_accuracy, seconds,
                      total_exact, notes=notes)


def _write_outputs(run_dir: RunDirectory, res: DemoResult, run: BackendRun, plots: bool) -> None:
    """Write config, plots and summary into the stage; ``res.files`` become the paths after the commit."""
    stage = run_dir.stage
    staged = [stage / "config.yaml"]
    interrupts.check()                  # between the files written: Ctrl-C stops the run before the commit
    res.config.to_yaml(stage / "config.yaml")
    staged += [Path(f) for f in run.files]
    if plots:
        plot_schedule(res.config, max(res.steps, res.config.end_step) + 1, path=stage / "schedule.png")
        targets = {r.name: r.target for r in res.layers if r.target is not None}
        plot_layer_sparsity({r.name: r.achieved for r in res.layers}, targets or None,
                            path=stage / "layer_sparsity.png",
                            title=f"{res.framework}: sparsity per layer ({res.config.pattern})")
        staged += [stage / "schedule.png", stage / "layer_sparsity.png"]
        for name, w in run.weights.items():
            interrupts.check()
            plot_mask(w != 0, name=name, path=stage / f"mask_{name}.png")
            staged.append(stage / f"mask_{name}.png")
    else:
        res.notes.append(f"plots skipped: matplotlib is not installed ({install_command('plot')})")
    staged.append(stage / "summary.json")
    # the manifest is written last, when the run is committed
    res.files = [str(run_dir.final_path(p)) for p in staged] + [str(run_dir.out / MANIFEST)]
    with open(stage / "summary.json", "w", encoding="utf-8") as fh:
        json.dump(res.to_dict(), fh, indent=2)


#: The demo table's word for a layer the pattern does not fit (``skip_incompatible_layers``).
SKIPPED = "skipped"


@contextlib.contextmanager
def _skips_in_table() -> Iterator[None]:
    """The core warns about layers the pattern does not fit, and when training ends before ``end_step``; the
    demo's table shows the first as skipped, and its notes say the second."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"pattern .* does not fit .* left dense", category=UserWarning)
        warnings.filterwarnings("ignore", category=TargetNotReachedWarning)
        yield


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def format_result(res: DemoResult) -> str:
    """The demo's printed report: per-layer table, totals, accuracy, files.

    Example:
        >>> r = DemoResult("torch", PruningConfig(), 10, 0.5, [LayerResult("fc1", (2, 2), 0.5, 0.5, 2, 4, True)],
        ...                0.9, 0.8, 1.0, True)
        >>> print(format_result(r).splitlines()[4])
        fc1    2x2    50.00%    50.00%  2 / 4         yes
    """
    cfg = res.config
    head = (f"sparsify demo: {res.framework}, digits MLP 64-128-64-10, pattern {cfg.pattern}, "
            f"{cfg.pruning_scope} scope, {cfg.sparsity_decay_type} schedule to {100 * cfg.target_sparsity:g}% "
            f"(start_step {cfg.start_step}, end_step {cfg.end_step}, pruning_frequency {cfg.pruning_frequency}), "
            f"{res.steps} steps per phase")
    rows = [("layer", "shape", "target", "achieved", "kept / total", "exact")]
    for r in res.layers:
        target = SKIPPED if r.note.startswith(SKIPPED) else _pct(r.target)
        rows.append((r.name, "x".join(map(str, r.shape)), target, _pct(r.achieved), f"{r.kept} / {r.total}",
                     "-" if r.exact is None else ("yes" if r.exact else "NO")))
    kept, total = res.total
    rows.append(("total", "", _pct(res.target) if cfg.pruning_scope == "global" else "",
                 _pct(1 - kept / total if total else 0.0), f"{kept} / {total}", "yes" if res.total_exact else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, ""]
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in (2, 3) else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    notes = [r for r in res.layers if r.note and r.target is None and r.note != "global scope"]
    for r in notes:
        lines.append(f"{r.name}: {r.note}")
    if any(r.target is None for r in res.layers):
        lines.append("total: over the pruned layers (the layers left dense are not counted)")
    lines.append(f"accuracy: dense {100 * res.dense_accuracy:.2f}%  ->  pruned {100 * res.pruned_accuracy:.2f}% "
                 f"(test set, {res.seconds:.1f} s of training)")
    lines += res.notes
    if res.files:
        lines.append("wrote: " + ", ".join(res.files))
    return "\n".join(lines)
