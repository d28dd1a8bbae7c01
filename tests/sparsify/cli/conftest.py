"""Fixtures of the CLI tests."""
from __future__ import annotations

import signal

import pytest


@pytest.fixture
def sigint_raises():
    """The interpreter's own SIGINT handler (KeyboardInterrupt) for the test, whatever an earlier test in this
    process left (a library may install its own, or ignore SIGINT), then that one back."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
