"""sparsify.cli.interrupts: a Ctrl-C that Python would drop as unraisable is raised in the running code."""
from __future__ import annotations

import gc
import sys
import time
import weakref

import pytest

from sparsify.cli.interrupts import interrupts_not_swallowed


def _interrupted_within(seconds: float, start_trouble) -> float:
    """How long until the swallowed interrupt is raised in the running code (short sleeps in a loop).

    Not one long sleep: a signal that lands while the main thread runs C code with no Python in it (the
    end of a long ``gc.collect()`` on a loaded machine) is raised at the next bytecode, and Python does
    not look for it before a blocking call such as ``time.sleep`` starts; any Ctrl-C has that delay.
    """
    started = time.perf_counter()
    with interrupts_not_swallowed(), pytest.raises(KeyboardInterrupt):
        start_trouble()
        while time.perf_counter() - started < seconds:
            time.sleep(0.02)          # the signal sent again interrupts this long before the end
    return time.perf_counter() - started


def test_an_interrupt_in_a_gc_callback_is_raised_after_the_collection(sigint_raises):
    armed = False                     # only the collection below: one the allocator starts earlier is not it
    calls: list = []

    def callback(phase, info):        # like JAX's callback, running when Ctrl-C comes
        if phase == "start" and armed and not calls:
            calls.append(phase)
            raise KeyboardInterrupt

    def collect():
        nonlocal armed
        armed = True
        gc.collect()
        armed = False

    gc.callbacks.append(callback)
    try:
        assert _interrupted_within(5, collect) < 4
    finally:
        gc.callbacks.remove(callback)
    assert calls == ["start"]


def test_an_interrupt_in_a_weakref_callback_or_del_is_raised_after_it(sigint_raises):
    class Finalized:
        def __del__(self):
            raise KeyboardInterrupt

    class Referent:
        pass

    def drop_one_referent():
        r = Referent()
        drop_one_referent.ref = weakref.ref(r, lambda _: (_ for _ in ()).throw(KeyboardInterrupt()))
        del r

    assert _interrupted_within(5, drop_one_referent) < 4
    assert _interrupted_within(5, lambda: Finalized()) < 4


def test_other_unraisable_exceptions_go_to_the_hook_that_was_there(sigint_raises):
    seen: list = []
    old_hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        class Finalized:
            def __del__(self):
                raise ValueError("in __del__")

        with interrupts_not_swallowed():
            Finalized()
        assert sys.unraisablehook == seen.append     # restored
    finally:
        sys.unraisablehook = old_hook
    assert [type(u.exc_value) for u in seen] == [ValueError]


def test_without_the_block_the_interrupt_is_lost(sigint_raises):
    dropped: list = []
    old_hook, sys.unraisablehook = sys.unraisablehook, dropped.append
    try:
        class Finalized:
            def __del__(self):
                raise KeyboardInterrupt

        Finalized()
        time.sleep(0.05)              # nothing comes
    finally:
        sys.unraisablehook = old_hook
    assert [type(u.exc_value) for u in dropped] == [KeyboardInterrupt]
