"""sparsify.cli.interrupts: SIGINT inside a gc callback is raised after it, not swallowed by the collector."""
from __future__ import annotations

import gc
import signal
import sys
import time

import pytest

from sparsify.cli.interrupts import interrupt_outside_gc_callbacks, interrupts_outside_gc_callbacks


def test_outside_a_gc_callback_the_interrupt_is_raised_at_once():
    with pytest.raises(KeyboardInterrupt):
        interrupt_outside_gc_callbacks(signal.SIGINT, sys._getframe())


def test_inside_a_gc_callback_it_is_raised_after_the_collection():
    inside: list = []

    def callback(phase, info):        # a callback like JAX's: the handler runs while it does
        if phase == "start" and not inside:
            try:
                interrupt_outside_gc_callbacks(signal.SIGINT, sys._getframe())
                inside.append("deferred")
            except KeyboardInterrupt:  # pragma: no cover - the bug: the collector would drop this
                inside.append("raised inside")

    unraisable: list = []
    old_hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    gc.callbacks.append(callback)
    try:
        with interrupts_outside_gc_callbacks(), pytest.raises(KeyboardInterrupt):
            gc.collect()
            time.sleep(5)             # the signal sent again arrives long before this ends
    finally:
        gc.callbacks.remove(callback)
        sys.unraisablehook = old_hook
    assert inside == ["deferred"] and unraisable == []


def test_the_handler_is_installed_only_inside_the_block():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts_outside_gc_callbacks():
        assert signal.getsignal(signal.SIGINT) is interrupt_outside_gc_callbacks
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_someone_else_installed_is_kept():
    mine = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_outside_gc_callbacks():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, mine)
