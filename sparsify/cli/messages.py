"""Error text fit for one line on a terminal or in a log: whole, plain, bounded.

Frameworks write their errors for a terminal: several lines, and sometimes ANSI escape codes (torch's
"Weights only load failed" puts its warning in bold). The command prints each error as one line, so
:func:`plain_message` removes escape sequences and other control characters, joins the lines, and keeps
the message whole up to :data:`MAX_MESSAGE` characters (a bound for text that may carry a value from a
file: past it, the message says how long it was).

Example:
    >>> plain_message("Weights only load failed. \\x1b[1mdo this only if you trust it\\x1b[0m.\\n\\t(1) In PyTorch 2.6")
    'Weights only load failed. do this only if you trust it. (1) In PyTorch 2.6'
"""
from __future__ import annotations

import re

from sparsify.yaml_io import shorten

__all__ = ["MAX_MESSAGE", "plain_message"]

#: Most characters of an error message printed (torch's longest load errors are about 1,000).
MAX_MESSAGE = 2000
# CSI (ESC [ ... final byte) and OSC (ESC ] ... BEL or ESC \) sequences, then any other escape pair
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain_message(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` without escape codes or control characters, on one line, at most ``limit`` characters.

    Example:
        >>> plain_message("a\\n\\n  b\\x07c", limit=3)
        'a b... (5 characters)'
    """
    text = _CONTROL.sub(" ", _ANSI.sub("", str(text)))
    return shorten(" ".join(text.split()), limit)
