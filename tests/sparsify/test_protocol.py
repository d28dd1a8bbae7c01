"""The update protocol: step bookkeeping written once for every adapter."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningConfig
from sparsify.protocol import MaskUpdate, PruningProtocol, sparsity_figures

W = {"a": np.arange(1.0, 17.0).reshape(4, 4), "b": -np.arange(1.0, 9.0).reshape(2, 4)}
SHAPES = {"a": (4, 4), "a_bias": (4,), "b": (2, 4)}


def proto(**cfg):
    base = dict(target_sparsity=0.5, start_step=0, end_step=10, pruning_frequency=5)
    return PruningProtocol({**base, **cfg}, SHAPES)


def run(p, steps, weights=W):
    """Advance through ``steps``; return the steps at which something was applied."""
    applied = []
    for s in steps:
        if p.advance(s, weights) is not None:
            applied.append(s)
    return applied


def test_selection_keeps_model_order_and_drops_1d():
    p = PruningProtocol({"op_names": ["b", "a"]}, {"b": (2, 4), "a": (4, 4), "c": (3,)})
    assert p.names == ["b", "a"]
    assert p.shapes == {"b": (2, 4), "a": (4, 4)}


def test_every_step_applies_exactly_at_update_points():
    p = proto()
    assert run(p, range(0, 20)) == [0, 5, 10]
    assert p.done_step == 10
    assert p.layer_sparsity() == {"a": 0.5, "b": 0.5}


def test_skipped_steps_never_lose_an_update():
    p = proto()
    assert run(p, [3, 4, 9, 13, 30]) == [3, 9, 13]        # 0 in (-1,3], 5 in (4,9], 10 in (9,13]
    ref = proto()
    run(ref, range(0, 31))
    assert all((p.masks[n] == ref.masks[n]).all() for n in p.names)


def test_steps_per_execution_blocks_give_the_masks_of_every_step():
    for block in (2, 3, 4, 7):
        p, ref = proto(end_step=20, pruning_frequency=3), proto(end_step=20, pruning_frequency=3)
        run(p, range(0, 30, block))
        run(ref, range(0, 30))
        # an update applied late uses the target of its (passed) update point, so the final masks agree
        assert all((p.masks[n] == ref.masks[n]).all() for n in p.names), block


def test_target_is_read_at_the_last_update_point():
    p = proto(end_step=100, pruning_frequency=10)
    assert p.target_sparsity(19) == p.target_sparsity(10) == p.engine.schedule.sparsity(10)


def test_due_and_next_step():
    p = proto(start_step=2, end_step=12, pruning_frequency=5)
    assert p.next_step() == 2 and not p.due(1) and p.due(2)
    p.advance(2, W)
    assert p.next_step() == 7 and not p.due(6) and p.due(8)
    p.advance(8, W)
    assert p.next_step() == 12
    p.advance(12, W)
    assert p.next_step() == -1 and not p.due(10 ** 9)


@pytest.mark.parametrize("leave_enabled", [True, False])
def test_next_step_is_the_first_due_step_for_an_open_ended_schedule(leave_enabled):
    # end_step=-1 never ends, so leave_enabled=False never releases: next_step follows the update points
    p = proto(sparsity_decay_type="constant", start_step=2, end_step=-1, pruning_frequency=3,
              leave_enabled=leave_enabled)
    for done in (None, 2, 5):
        if done is not None:
            assert p.advance(done, W) is not None
        nxt = p.next_step()
        first_due = next(s for s in range(p.done_step + 1, 100) if p.due(s))
        assert nxt == first_due == (2 if done is None else done + 3), (done, nxt, first_due)
    assert not p.released


@pytest.mark.parametrize("frequency", [2 ** 61, 0])
def test_next_step_never_names_a_step_past_int64(frequency):
    p = proto(sparsity_decay_type="constant", end_step=-1, pruning_frequency=frequency)
    p.restore(2 ** 63 - 1, {n: np.ones(s) for n, s in p.shapes.items()})   # the last legal step
    assert p.next_step() == -1 and not p.due(2 ** 63 - 1)
    p.restore(2 ** 63 - 2, {n: np.ones(s) for n, s in p.shapes.items()})
    assert p.next_step() == (-1 if frequency else 2 ** 63 - 1)


def test_release_after_end_keeps_zeros_once_and_stops():
    p = proto(leave_enabled=False)
    run(p, range(0, 11))
    last = {n: m.copy() for n, m in p.masks.items()}
    assert p.next_step() == 11
    upd = p.advance(11)                                    # no weights needed for a release
    assert isinstance(upd, MaskUpdate) and upd.released and p.released
    assert all(m.all() for m in upd.masks.values())
    assert all((upd.keep_values[n] == last[n]).all() for n in p.names)
    assert p.advance(12, W) is None and not p.due(50) and p.next_step() == -1
    assert p.total_sparsity() == 0.0


def test_update_and_release_in_one_jump():
    p = proto(leave_enabled=False)
    run(p, [0, 6])
    upd = p.advance(40, W)                                 # passes the update at 10 and the end
    assert upd.released and all(m.all() for m in upd.masks.values())
    ref = proto(leave_enabled=True)
    run(ref, [0, 6, 40])
    assert all((upd.keep_values[n] == ref.masks[n]).all() for n in p.names)


def test_an_update_needs_weights_but_reads_them_lazily():
    p = proto()
    calls = []

    def read():
        calls.append(1)
        return W

    assert p.advance(0, read) is not None and calls == [1]
    assert p.advance(1, read) is None and calls == [1]
    with pytest.raises(ValueError, match="update is due at step 5"):
        p.advance(5)


def test_monotone_masks_are_subsets():
    p = proto(target_sparsity=0.75, end_step=20)
    rng = np.random.default_rng(0)
    prev = None
    for s in range(0, 21, 5):
        w = {n: rng.normal(size=v.shape) for n, v in W.items()}
        p.advance(s, w)
        if prev is not None:
            assert all(not (p.masks[n] & ~prev[n]).any() for n in p.names)
        prev = {n: m.copy() for n, m in p.masks.items()}


def test_masks_are_read_only_views():
    p = proto()
    p.advance(0, W)
    with pytest.raises(ValueError):
        p.masks["a"][0, 0] = False


def test_state_dict_resume_equals_uninterrupted():
    full = proto(end_step=20, pruning_frequency=3)
    run(full, range(0, 25))
    first = proto(end_step=20, pruning_frequency=3)
    run(first, range(0, 11))
    state = first.state_dict()
    second = proto(end_step=20, pruning_frequency=3)
    second.load_state_dict(state)
    assert second.done_step == first.done_step
    run(second, range(11, 25))
    assert all((second.masks[n] == full.masks[n]).all() for n in full.names)
    assert second.done_step == full.done_step


def test_state_dict_refuses_another_config_naming_the_keys():
    p = proto()
    p.advance(0, W)
    other = proto(pattern="2:4", target_sparsity=0.5, end_step=12)
    with pytest.raises(ValueError, match=r"end_step: saved 10, now 12.*pattern: saved '1x1', now '2:4'"):
        other.load_state_dict(p.state_dict())
    assert other.done_step == -1


@pytest.mark.parametrize("change, match", [
    (lambda s: s.update(names=["b", "a"]), "saved for pruned weights"),
    (lambda s: s["masks"].update(a=np.full((4, 4), 3.0)), "only 0 and 1"),
    (lambda s: s["masks"].update(a=np.ones((2, 2), bool)), r"shape \(2, 2\)"),
    (lambda s: s["masks"].pop("b"), "masks are for weights"),
    (lambda s: s.update(done_step=-100), r"done_step must be in \[-1"),
    (lambda s: s.update(done_step=2 ** 70), r"done_step must be in"),
    (lambda s: s.update(done_step=1.5), "done_step must be an integer"),
    (lambda s: s.pop("masks"), "missing keys"),
    (lambda s: s.update(version=99), "version 99"),
    (lambda s: s.update(released=True), r"released=True does not match.*leave_enabled=True"),
])
def test_load_state_dict_checks_everything_before_changing(change, match):
    p = proto()
    state = p.state_dict()
    change(state)
    fresh = proto()
    with pytest.raises((ValueError, TypeError), match=match):
        fresh.load_state_dict(state)
    assert fresh.done_step == -1 and all(m.all() for m in fresh.masks.values())


def test_check_state_checks_the_run_not_the_masks():
    p = proto()
    p.advance(0, W)
    state = {**p.state_dict(), "masks": "converted by the adapter after this check"}
    fresh = proto()
    fresh.check_state(state)                              # config, names, version and keys agree
    with pytest.raises(ValueError, match=r"end_step: saved 10, now 12"):
        proto(end_step=12).check_state(state)
    with pytest.raises(ValueError, match=r"^state was saved for pruned weights \['b', 'a'\], but this model prunes "):
        fresh.check_state({**state, "names": ["b", "a"]})
    assert fresh.done_step == -1 and all(m.all() for m in fresh.masks.values())


def test_restore_from_framework_variables_accepts_01_floats_and_derives_release():
    p = proto(leave_enabled=False)
    p.restore(11, {n: np.ones(s) for n, s in p.shapes.items()})
    assert p.released and p.advance(12, W) is None
    q = proto()
    q.restore(5, {n: np.ones(s, np.float32) for n, s in q.shapes.items()})
    assert not q.released and q.due(10) and not q.due(9)


@pytest.mark.parametrize("done, released", [(5, True), (10, True), (11, False)])
def test_restore_refuses_a_release_flag_the_schedule_contradicts(done, released):
    # release happens exactly at the first step after end_step with leave_enabled=False
    p = proto(leave_enabled=False)
    p.advance(0, W)
    before = {n: m.copy() for n, m in p.masks.items()}
    with pytest.raises(ValueError, match=rf"released={released} does not match done_step={done}"):
        p.restore(done, {n: np.ones(s) for n, s in p.shapes.items()}, released=released)
    assert p.done_step == 0 and not p.released
    assert all((p.masks[n] == before[n]).all() for n in p.names)
    p.restore(done, {n: np.ones(s) for n, s in p.shapes.items()}, released=not released)
    assert p.released == (not released)


def test_weights_are_checked_against_the_selection():
    p = proto()
    with pytest.raises(ValueError, match=r"weights\['a'\] has shape \(16,\)"):
        p.advance(0, {"a": np.ones(16), "b": W["b"]})
    with pytest.raises(ValueError, match=r"lacks the pruned weights \['b'\]"):
        p.advance(0, {"a": W["a"]})
    assert p.done_step == -1


def test_figures_match_every_adapter_format():
    p = proto()
    p.advance(10, W)
    assert p.figures() == {"sparsity": 0.5, "sparsity/a": 0.5, "sparsity/b": 0.5}
    assert sparsity_figures({}) == {"sparsity": 0.0}


def test_gradient_criterion_takes_scores():
    p = PruningProtocol(PruningConfig(criterion="snip", target_sparsity=0.5, end_step=0), {"w": (1, 4)})
    upd = p.advance(0, scores={"w": np.array([[4.0, 1.0, 3.0, 2.0]])})
    assert upd.masks["w"].tolist() == [[True, False, True, False]]


@settings(max_examples=60, deadline=None)
@given(freq=st.integers(-1, 7), begin=st.integers(0, 6), length=st.integers(0, 20),
       jumps=st.lists(st.integers(1, 9), min_size=1, max_size=12), leave=st.booleans())
def test_property_any_step_sequence_ends_like_every_step(freq, begin, length, jumps, leave):
    cfg = dict(start_step=begin, end_step=begin + length, pruning_frequency=freq, leave_enabled=leave)
    steps = list(np.cumsum(jumps) - 1)
    p, ref = proto(**cfg), proto(**cfg)
    run(p, [int(s) for s in steps])
    run(ref, range(0, int(steps[-1]) + 1))
    # the same update points were passed; only the step an update was applied at may differ
    assert p.released == ref.released
    assert all((p.masks[n] == ref.masks[n]).all() for n in p.names)

