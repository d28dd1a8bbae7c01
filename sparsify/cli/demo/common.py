"""What every demo backend shares: the model shape, hyper-parameters, the progress bar and the result record.

A backend module exposes ``OUTPUTS`` (the top-level names it writes into an
output directory) and ``train(config, data, steps, seed, progress, out) ->
BackendRun``: it trains the MLP ``64 -> 128 -> 64 -> 10`` dense for ``steps``
steps, then prunes and fine-tunes it for ``steps`` more with its framework's
adapter, calling ``progress.step()`` once per step (after
``progress.phase(...)``), and writes the pruned model into the directory
``out`` when it is not None.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TextIO

import numpy as np

from ..atomic import OutputError
from .save_errors import WatchedFile, os_error_in

__all__ = ["LAYERS", "SIZES", "BATCH_SIZE", "LEARNING_RATE", "LOG_SECONDS", "BackendRun", "DemoProgress",
           "distillation_note", "format_duration", "writing"]

#: Layer names of the demo MLP and its widths (input, hidden..., classes).
LAYERS: tuple[str, ...] = ("fc1", "fc2", "out")
SIZES: tuple[int, ...] = (64, 128, 64, 10)
BATCH_SIZE = 64
LEARNING_RATE = 0.01
#: Longest time between two progress lines in a log (when stderr is not a terminal).
LOG_SECONDS = 30.0


def distillation_note(distillation: Any) -> str:
    """What a distilled demo says of its teacher (a :class:`sparsify.distillation.DistillationConfig`).

    Example:
        >>> from sparsify.distillation import DistillationConfig
        >>> distillation_note(DistillationConfig())
        'distilled from the dense model (temperature 2, weight fading 1 -> 0 over the first half of pruning)'
        >>> distillation_note(DistillationConfig(weight=0.5, temperature=4))
        'distilled from the dense model (temperature 4, weight 0.5)'
    """
    weight = ("weight fading 1 -> 0 over the first half of pruning" if distillation.weight_schedule == "fade"
              else f"weight {distillation.weight:g}")
    return f"distilled from the dense model (temperature {distillation.temperature:g}, {weight})"


@dataclass
class BackendRun:
    """What a backend hands back.

    Attributes:
        dense_accuracy: test accuracy after the dense phase.
        pruned_accuracy: test accuracy after pruning + fine-tuning.
        weights: final weights of every layer of ``LAYERS``, canonical layout.
        pruned: the layers the adapter pruned (a subset of ``weights``).
        final_step: the adapter's step count at the end of the pruning phase.
        files: paths of the pruned model files written into ``out``.
        extra: backend-specific notes printed under the table.
    """

    dense_accuracy: float
    pruned_accuracy: float
    weights: dict[str, np.ndarray]
    pruned: list[str]
    final_step: int
    files: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[Callable[[Any], WatchedFile]]:
    """Turn any failure of a framework's saver inside the block into an :class:`OutputError` naming ``path``.

    Frameworks report a full disk in their own ways (torch: "unexpected pos"
    from its zip writer, TensorFlow: "Graph execution error ... SaveV2"); the
    user gets one line naming the OS error ("No space left on device") and the
    file it hit. The block receives ``watch(fh)``: hand the saver
    ``watch(open(...))`` so that an ``OSError`` its writer swallows is still
    known (:class:`~sparsify.cli.demo.save_errors.WatchedFile`). Interrupts
    pass through unchanged.
    """
    watched: list[WatchedFile] = []

    def watch(fh: Any) -> WatchedFile:
        watched.append(WatchedFile(fh, getattr(fh, "name", path)))
        return watched[-1]
    try:
        yield watch
    except (KeyboardInterrupt, OutputError):
        raise
    except Exception as e:  # noqa: BLE001 - framework savers raise their own error types
        found = next((w.error for w in watched if w.error is not None), None)
        if found is None:
            found = e if isinstance(e, OSError) and e.errno else os_error_in(str(e))
        if found is not None:
            where = os.fspath(found.filename) if isinstance(found.filename, (str, os.PathLike)) else os.fspath(path)
            raise OutputError(found.errno, f"could not write {where!r}: "
                                           f"{found.strerror or ' '.join(str(found).split())}") from None
        msg = " ".join(str(e).split())[:300] or type(e).__name__
        raise OutputError(errno.EIO, f"could not write {os.fspath(path)!r}: {msg}") from None


def format_duration(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``).

    Example:
        >>> format_duration(3.2), format_duration(3725)
        ('0:03', '1:02:05')
    """
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class DemoProgress:
    """The demo's progress over both phases: a tqdm bar on a terminal, plain lines in a log.

    On a terminal (``file.isatty()``) a bar is redrawn in place. Anywhere else (a redirected log, a pipe)
    each report is one newline-terminated line, never a carriage return: one every tenth of the run and at
    least every :data:`LOG_SECONDS` seconds, and one at the end, which shows the step and sparsity reached.

    The first step of a phase pays for graph tracing / building (seconds in
    TensorFlow); counting it would show "2.5 s/step, ETA 25:03" for a 3 s run.
    The rate is the average time per step over the steps after the first one
    of the current phase, and the ETA that of the steps left at that rate.

    Example:
        >>> import io
        >>> t = iter([0.0, 2.0, 2.01, 2.02, 2.03, 2.04]).__next__
        >>> log = io.StringIO()
        >>> p = DemoProgress(4, file=log, clock=t)
        >>> p.phase("dense"); p.step(); p.step(); p.step()
        >>> p.rate_text()
        '10.0 ms/step, ETA 0:00'
        >>> p.step(0.5); p.close()
        >>> print(log.getvalue().splitlines()[-1])
        dense: 100% 4/4 [0:02, 10.0 ms/step, ETA 0:00, sparsity 50.0%]
    """

    def __init__(self, total: int, enabled: bool = True, file: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter, terminal: bool | None = None) -> None:
        self.total = total
        self._clock = clock
        self._file = file if file is not None else sys.stderr
        if terminal is None:
            isatty = getattr(self._file, "isatty", None)
            terminal = bool(isatty()) if callable(isatty) else False
        self.enabled = enabled
        self.terminal = terminal
        self._bar: Any = None
        if enabled and terminal:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="step", dynamic_ncols=True, leave=False, mininterval=0.5,
                             file=self._file,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
        self.n = 0
        self._name = ""
        self._phase_start: float | None = None     # time of the end of the phase's first step
        self._phase_steps = 0                      # steps of the phase after its first
        self._last = clock()
        self._started = self._last
        self._logged_n = 0                         # the step of the last plain line
        self._logged_at = self._last
        self._sparsity: float | None = None

    def phase(self, name: str, sparsity: float | None = None) -> None:
        """Start a phase (shown as the bar's description); the next step is its first."""
        self._name = name
        if self._bar is not None:
            self._bar.set_description_str(name, refresh=False)
        self._phase_start, self._phase_steps = None, 0
        self._sparsity = sparsity
        self._last = self._clock()

    def step(self, sparsity: float | None = None) -> None:
        """One training step done (optionally with the current sparsity)."""
        now = self._clock()
        if self._phase_start is None:
            self._phase_start = now          # the first step of the phase (tracing) is not timed
        else:
            self._phase_steps += 1
        self._last = now
        if sparsity is not None:
            self._sparsity = sparsity
        self.n += 1
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(1)
        elif self.enabled and (self.n * 10 // max(self.total, 1) > self._logged_n * 10 // max(self.total, 1)
                               or now - self._logged_at >= LOG_SECONDS or self.n == self.total):
            self._log_line(now)

    def _postfix(self) -> str:
        post = self.rate_text()
        if self._sparsity is not None:
            post = f"{post}, sparsity {100 * self._sparsity:.1f}%" if post else f"sparsity {100 * self._sparsity:.1f}%"
        return post

    def _log_line(self, now: float) -> None:
        post = self._postfix()
        pct = 100 * self.n / max(self.total, 1)
        self._file.write(f"{self._name}: {pct:3.0f}% {self.n}/{self.total} "
                         f"[{format_duration(now - self._started)}{', ' + post if post else ''}]\n")
        self._file.flush()
        self._logged_n, self._logged_at = self.n, now

    def rate_text(self) -> str:
        """``"X ms/step, ETA m:ss"`` from the timed steps of this phase ('' before any)."""
        if not self._phase_steps or self._phase_start is None:
            return ""
        per = (self._last - self._phase_start) / self._phase_steps
        rate = f"{1000 * per:.1f} ms/step" if per < 1 else f"{per:.2f} s/step"
        return f"{rate}, ETA {format_duration(per * (self.total - self.n))}"

    def close(self) -> None:
        """Remove the bar; in a log, the last line says where the run stopped (if not said yet)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled and self.n > self._logged_n:
            self._log_line(self._last)

    def __enter__(self) -> "DemoProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
