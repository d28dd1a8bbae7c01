"""TensorBoard scalars of a pruning run, with the ``tensorboard`` package alone (no torch, no Keras): the one
writer behind ``sparsify_torch.prune(..., log_dir=)`` and the Keras ``PruningCallback(log_dir=)``.

The tags every adapter writes: ``sparsity/total`` and ``sparsity/<weight name>`` at every mask update, from
``protocol.figures()``. Needs the ``tensorboard`` package (``pip install tensorboard``); it is imported only
when a writer is made (it imports TensorFlow where TensorFlow is installed, with its native start-up lines
silenced).

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> w = SparsityWriter(d)
    >>> w.write({"sparsity": 0.5, "sparsity/fc/kernel": 0.5}, step=3); w.close()
    >>> read_scalars(d)
    {'sparsity/total': [(3, 0.5)], 'sparsity/fc/kernel': [(3, 0.5)]}
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Mapping

from ..native_stderr import native_stderr_silenced

__all__ = ["SparsityWriter", "read_scalars"]


def _event_file_writer() -> Any:
    """``tensorboard``'s ``EventFileWriter`` class; its first import silenced (it may start TensorFlow)."""
    if "tensorboard" not in sys.modules:
        with native_stderr_silenced():
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
    else:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    return EventFileWriter


class SparsityWriter:
    """Writes sparsity figures as TensorBoard scalar events into ``log_dir``.

    Raises:
        TypeError: ``log_dir`` is not a path.
        ImportError: the ``tensorboard`` package is missing (names what to install).
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        try:
            writer_class = _event_file_writer()
        except ImportError as e:
            raise ImportError(f"log_dir needs TensorBoard ({e}): pip install tensorboard") from None
        self.log_dir = os.fspath(log_dir)
        self._writer: Any = writer_class(self.log_dir)

    def write(self, figures: Mapping[str, float], step: int) -> None:
        """``sparsity/total`` and every ``sparsity/<name>`` of ``figures`` (as ``protocol.figures()`` gives them)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        figures = dict(figures)
        values = [("sparsity/total", figures.pop("sparsity"))] + list(figures.items())
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values])
        self._writer.add_event(Event(summary=summary, step=int(step), wall_time=time.time()))
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
