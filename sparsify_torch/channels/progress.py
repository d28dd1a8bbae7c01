"""Progress bars for long structured-pruning work (calibration, latency search).

``show_tqdm=None`` (the default everywhere) shows a bar when standard error is
a terminal and stays silent otherwise (logs, CI, notebooks' captured stderr);
``True``/``False`` force it on or off.

Example:
    >>> progress_enabled(False), progress_enabled(True)
    (False, True)
    >>> bar = progress_bar(False, total=3, desc="search")
    >>> bar.update(1); bar.set_postfix(best=0.5); bar.close()  # a silent stand-in
"""
from __future__ import annotations

import sys
from typing import Any, Optional

__all__ = ["progress_enabled", "progress_bar", "check_show_tqdm"]


def check_show_tqdm(show_tqdm: Optional[bool]) -> None:
    """Raise ``TypeError`` unless ``show_tqdm`` is True, False or None."""
    if show_tqdm is not None and not isinstance(show_tqdm, bool):
        raise TypeError(f"show_tqdm must be True, False or None (None: on when stderr is a terminal), "
                        f"got {show_tqdm!r}")


def progress_enabled(show_tqdm: Optional[bool]) -> bool:
    """Whether to show a bar: ``show_tqdm`` itself, or (None) whether stderr is a terminal."""
    check_show_tqdm(show_tqdm)
    if show_tqdm is not None:
        return show_tqdm
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # closed or detached stream
        return False


class _NoBar:
    """The part of tqdm's interface the channel code uses, doing nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(show_tqdm: Optional[bool], **kwargs: Any):
    """A ``tqdm`` bar on stderr when :func:`progress_enabled`, else a silent stand-in with the same methods."""
    if not progress_enabled(show_tqdm):
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(file=sys.stderr, **kwargs)
