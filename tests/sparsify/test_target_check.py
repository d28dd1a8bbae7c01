"""sparsify.target_check: the end-of-training warning when the schedule never reached its target."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.protocol import PruningProtocol
from sparsify.target_check import TargetNotReachedWarning, unreached_message, warn_if_unreached

W = {"w": np.arange(1.0, 17.0).reshape(4, 4)}


def protocol(**cfg) -> PruningProtocol:
    return PruningProtocol({"target_sparsity": 0.5, "pruning_frequency": 10, **cfg}, {"w": (4, 4)})


def test_stopping_before_end_step_names_the_step_end_step_and_sparsity():
    p = protocol(start_step=0, end_step=100)
    p.advance(20, W)
    assert unreached_message(p, 25, where="fit") == (
        "fit: training ended at step 25 before the pruning schedule reached its target: the last mask update "
        "was at step 20 and the masks hold sparsity 0.2500, but target_sparsity 0.5 is reached only at "
        "end_step 100. Train for at least end_step steps, or lower end_step (and pruning_frequency).")


def test_no_update_at_all_says_so():
    p = protocol(start_step=50, end_step=100)
    assert "no mask update ran and the masks hold sparsity 0.0000" in unreached_message(p, 10, where="fit")


def test_reaching_end_step_or_releasing_or_a_zero_target_is_silent():
    p = protocol(start_step=0, end_step=100)
    p.advance(100, W)
    assert unreached_message(p, 100, where="fit") is None
    released = protocol(start_step=0, end_step=10, leave_enabled=False)
    released.advance(11, W)
    assert released.released and unreached_message(released, 11, where="fit") is None
    assert unreached_message(protocol(target_sparsity=0.0, end_step=100), 5, where="fit") is None


def test_the_sparsity_an_adapter_reads_replaces_the_protocols():
    p = protocol(start_step=0, end_step=100)
    assert "the masks hold sparsity 0.1250" in unreached_message(p, 5, where="hook", sparsity=0.125)


def test_warns_once_per_protocol_with_its_own_category():
    p = protocol(start_step=0, end_step=100)
    with pytest.warns(TargetNotReachedWarning, match="step 3 before"):
        assert warn_if_unreached(p, 3, where="fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_unreached(p, 4, where="fit")


@settings(max_examples=40, deadline=None)
@given(end=st.integers(0, 60), freq=st.integers(1, 15), stop=st.integers(0, 80))
def test_silent_exactly_when_the_last_update_point_reached_end_step(end, freq, stop):
    p = protocol(start_step=0, end_step=end, pruning_frequency=freq)
    p.advance(stop, W)
    assert (unreached_message(p, stop, where="fit") is None) == (stop >= end)
