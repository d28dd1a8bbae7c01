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
``sparsify demo --framework torch --steps 100`` prints. What runs (the config, the
classifier kept dense, the teacher): :mod:`.plan`; what is measured and printed: :mod:`.result`.

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
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig
from sparsify.extras import install_command
from sparsify.target_check import TargetNotReachedWarning

from .. import interrupts
from ..atomic import OutputError
from ..frameworks import installed
from ..plots import plot_layer_sparsity, plot_mask, plot_schedule
from ..run_directory import MANIFEST, RunDirectory
from . import keras_backend, tf_graph, torch_backend
from .common import LAYERS, BackendRun, DemoProgress, writing
from .data import load_digits_split
from .plan import (CLASSIFIER, DEFAULT_STEPS, default_config, demo_distillation, fit_schedule_into, plan_config,
                   removes_rows)
from .result import DemoResult, LayerResult, demo_result, format_result

__all__ = ["FRAMEWORKS", "DEFAULT_STEPS", "CLASSIFIER", "MAX_SEED", "default_config",
           "fit_schedule_into", "removes_rows", "demo_outputs", "default_framework", "run_demo", "format_result",
           "DemoResult", "LayerResult"]

#: ``--framework`` name -> backend (a module or object with ``IMPORT_FRAMEWORK``, ``OUTPUTS`` and ``train``,
#: which imports the framework when called).
FRAMEWORKS: dict[str, Any] = {"tf-graph": tf_graph, "keras": keras_backend.KERAS, "tf-keras": keras_backend.TF_KERAS,
                              "torch": torch_backend}
#: Largest ``seed`` (NumPy, torch and TensorFlow all take a 32-bit seed).
MAX_SEED = 2 ** 32 - 1


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


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo \
            or (hi is not None and value > hi):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


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
            (:class:`~sparsify.cli.run_directory.RunDirectory`, manifest
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
    distill = demo_distillation(framework, distillation)
    fit_note = ""
    if fit_schedule:
        cfg, fit_note = fit_schedule_into(cfg, steps)
    cfg, excluded_note = plan_config(cfg, prune_classifier)
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
        return demo_result(framework, cfg, steps, run, time.perf_counter() - t0, excluded_note, fit_note)
    try:
        with run_dir:                   # staging directory, removed on any error or interrupt
            with DemoProgress(2 * steps, progress) as bar, _skips_in_table():
                run = demo_backend.train(cfg, data, steps, int(seed), bar, run_dir.stage, **distill)
            res = demo_result(framework, cfg, steps, run, time.perf_counter() - t0, excluded_note, fit_note)
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


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


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


@contextlib.contextmanager
def _skips_in_table() -> Iterator[None]:
    """The core warns about layers the pattern does not fit, and when training ends before ``end_step``; the
    demo's table shows the first as skipped, and its notes say the second."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"pattern .* does not fit .* left dense", category=UserWarning)
        warnings.filterwarnings("ignore", category=TargetNotReachedWarning)
        yield
