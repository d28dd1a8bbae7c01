"""TensorBoard scalars of a :class:`~sparsify_torch.Pruner`, through ``torch.utils.tensorboard``.

The same tags as the Keras callback's ``log_dir=``: ``sparsity/total`` and
``sparsity/<weight name>`` at every mask update, from
``pruner.protocol.figures()``. Needs the ``tensorboard`` package
(``pip install tensorboard``); it is imported only when a writer is made.

Example:
    >>> import tempfile, torch, sparsify_torch
    >>> d = tempfile.mkdtemp()
    >>> p = sparsify_torch.prune(torch.nn.Linear(8, 8), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0},
    ...                          log_dir=d)
    >>> _ = p.remove()
    >>> read_scalars(d)["sparsity/weight"]
    [(0, 0.5)]
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, Mapping

__all__ = ["SparsityWriter", "read_scalars"]


@contextlib.contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """fd 2 to /dev/null: ``torch.utils.tensorboard`` imports TensorFlow when it is installed, whose native
    start-up lines (absl, CUDA probes) would otherwise land in the user's terminal or notebook."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class SparsityWriter:
    """Writes sparsity figures as TensorBoard scalars into ``log_dir``.

    Raises:
        TypeError: ``log_dir`` is not a path.
        ImportError: the ``tensorboard`` package is missing (names what to install).
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        try:
            if "tensorboard" not in sys.modules:
                with _native_stderr_quiet():
                    from torch.utils.tensorboard import SummaryWriter
            else:
                from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(f"log_dir needs TensorBoard ({e}): pip install tensorboard") from None
        self.log_dir = os.fspath(log_dir)
        self._writer = SummaryWriter(self.log_dir)

    def write(self, figures: Mapping[str, float], step: int) -> None:
        """``sparsity/total`` and every ``sparsity/<name>`` of ``figures`` (as ``protocol.figures()`` gives them)."""
        figures = dict(figures)
        self._writer.add_scalar("sparsity/total", float(figures.pop("sparsity")), step)
        for tag, value in figures.items():
            self._writer.add_scalar(tag, float(value), step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of the scalar events in ``log_dir`` (for tests and notebooks)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc: Any = EventAccumulator(os.fspath(log_dir))
    acc.Reload()
    return {tag: [(e.step, round(float(e.value), 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
