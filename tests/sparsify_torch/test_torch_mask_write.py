"""write_update: the one torch writer, on a parametrized weight (Pruner) and on a shard (ShardedPruner)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils import parametrize

from sparsify.protocol import MaskUpdate
from sparsify_torch.layers import prunable_weights
from sparsify_torch.mask_write import ParametrizedStorage, ShardStorage, optimizer_state, write_update
from sparsify_torch.parametrization import MaskParametrization
from test_torch_fsdp import spawn

T, F = True, False


def parametrized(weight: list, mask: list) -> tuple[torch.nn.Linear, MaskParametrization]:
    """A bias-free Linear holding ``weight`` under a mask parametrization holding ``mask``."""
    w = torch.tensor(weight)
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    par = MaskParametrization(torch.tensor(mask))
    parametrize.register_parametrization(lin, "weight", par)
    return lin, par


def storage_of(lin: torch.nn.Linear, par: MaskParametrization, optimizer=None) -> ParametrizedStorage:
    return ParametrizedStorage(prunable_weights(lin)[0], lin.parametrizations.weight.original, par.mask, optimizer)


def update(masks: list, zero: list | None = None, released: bool = False, grown: list | None = None) -> MaskUpdate:
    m = np.array(masks)
    return MaskUpdate(1, {"weight": m}, {"weight": m if zero is None else np.array(zero)}, released,
                      {} if grown is None else {"weight": np.array(grown)})


def bits(t: torch.Tensor) -> list:
    """Values with the sign of zeros visible (-0.0 and 0.0 differ)."""
    return [[(float(v), bool(torch.signbit(v))) for v in row] for row in t]


def assert_state(t: torch.Tensor, expected: list) -> None:
    """Optimizer state close to ``expected`` (Adam's float32 arithmetic), exactly zero where it is zero."""
    want = torch.tensor(expected)
    assert torch.equal(t == 0, want == 0), t
    torch.testing.assert_close(t, want)


class Resets:
    def __init__(self) -> None:
        self.count = 0

    def reset(self) -> None:
        self.count += 1


def test_plain_update_keeps_the_parametrized_weight_dense_and_resets_the_statistics():
    lin, par = parametrized([[1.0, -2.0, 3.0]], [[T, T, F]])
    stats = Resets()
    write_update(update([[F, T, T]]), {"weight": storage_of(lin, par)}, stats)
    assert lin.parametrizations.weight.original.tolist() == [[1.0, -2.0, 3.0]]      # pruned values kept
    assert par.mask.tolist() == [[0.0, 1.0, 1.0]]
    assert lin.weight.tolist() == [[0.0, -2.0, 3.0]]
    assert stats.count == 1


def test_plain_update_of_a_shard_holds_dense_times_mask_and_stores_the_rest():
    layout = prunable_weights(torch.nn.Linear(3, 2))[0]
    shard = ShardStorage(layout, torch.tensor([[1.0, 0.0, 3.0], [0.0, 5.0, -6.0]]),
                         torch.tensor([[T, F, T], [F, T, T]]), torch.tensor([[0.0, -2.0, 0.0], [4.0, 0.0, 0.0]]))
    write_update(update([[T, T, F], [F, F, T]]), {"weight": shard})
    assert shard.local.tolist() == [[1.0, -2.0, 0.0], [0.0, 0.0, -6.0]]
    assert shard.stored.tolist() == [[0.0, 0.0, 3.0], [4.0, 5.0, 0.0]]
    assert shard.mask.tolist() == [[T, T, F], [F, F, T]]


def test_a_shard_without_stored_values_drops_the_pruned_ones():
    layout = prunable_weights(torch.nn.Linear(2, 1))[0]
    shard = ShardStorage(layout, torch.tensor([[1.0, -2.0]]), torch.tensor([[T, T]]))
    write_update(update([[T, F]]), {"weight": shard})
    assert bits(shard.local) == [[(1.0, False), (-0.0, True)]]
    write_update(update([[T, T]]), {"weight": shard})
    assert bits(shard.local) == [[(1.0, False), (-0.0, True)]]               # nothing to bring back


def test_a_release_bakes_the_last_zeros_into_both_storage_kinds():
    lin, par = parametrized([[1.0, -2.0], [3.0, -4.0]], [[T, F], [F, T]])
    layout = prunable_weights(lin)[0]
    shard = ShardStorage(layout, torch.tensor([[1.0, -0.0], [0.0, -4.0]]), torch.tensor([[T, F], [F, T]]),
                         torch.tensor([[0.0, -2.0], [3.0, 0.0]]))
    release = update([[T, T], [T, T]], zero=[[T, F], [F, T]], released=True)
    write_update(release, {"weight": storage_of(lin, par)})
    write_update(release, {"weight": shard})
    expected = [[(1.0, False), (-0.0, True)], [(0.0, False), (-4.0, True)]]
    assert bits(lin.parametrizations.weight.original.detach()) == expected
    assert par.mask.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert bits(shard.local) == expected
    assert shard.stored.tolist() == [[0.0, 0.0], [0.0, 0.0]] and shard.mask.all()


def adam_stepped(param: torch.Tensor) -> torch.optim.Adam:
    """Adam after one step on ``param`` with gradient 1 everywhere (state 0.1, 0.001 everywhere), the
    weights set back to what they were."""
    opt = torch.optim.Adam([param], lr=0.5)
    before = param.detach().clone()
    param.grad = torch.ones_like(param)
    opt.step()
    with torch.no_grad():
        param.copy_(before)
    return opt


def test_regrowth_zeroes_the_grown_weights_and_their_adam_state():
    lin, par = parametrized([[1.0, 2.0, 3.0]], [[T, F, F]])
    original = lin.parametrizations.weight.original
    opt = adam_stepped(original)
    write_update(update([[T, T, F]], grown=[[F, T, F]]), {"weight": storage_of(lin, par, opt)})
    assert original.tolist() == [[1.0, 0.0, 3.0]]
    assert par.mask.tolist() == [[1.0, 1.0, 0.0]]
    state = opt.state[original]
    assert_state(state["exp_avg"], [[0.1, 0.0, 0.1]])
    assert_state(state["exp_avg_sq"], [[0.001, 0.0, 0.001]])
    assert state["step"].item() == 1.0                       # a scalar, not the weight's shape: untouched


def test_regrowth_on_a_shard_zeroes_the_stored_value_and_the_adam_state():
    layout = prunable_weights(torch.nn.Linear(3, 1))[0]
    param = torch.nn.Parameter(torch.tensor([[1.0, 2.0, 3.0]]))
    opt = adam_stepped(param)
    shard = ShardStorage(layout, param, torch.tensor([[T, F, F]]), torch.tensor([[0.0, 2.0, 3.0]]), opt)
    with torch.no_grad():
        param.mul_(shard.mask)                               # the shard holds dense * mask
    write_update(update([[T, T, F]], grown=[[F, T, F]]), {"weight": shard})
    assert param.tolist() == [[1.0, 0.0, 0.0]]
    assert shard.stored.tolist() == [[0.0, 0.0, 3.0]]
    assert_state(opt.state[param]["exp_avg"], [[0.1, 0.0, 0.1]])


def test_a_fused_qkv_weight_writes_only_its_rows_of_the_tensor_and_the_optimizer_state():
    mha = torch.nn.MultiheadAttention(2, 1, bias=False)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.arange(1.0, 13.0).view(6, 2))
    layouts = {w.name: w for w in prunable_weights(mha)}
    parametrize.register_parametrization(mha, "in_proj_weight", MaskParametrization(torch.ones(6, 2)))
    original = mha.parametrizations.in_proj_weight.original
    opt = adam_stepped(original)
    k = ParametrizedStorage(layouts["in_proj_weight.k"], original, mha.parametrizations.in_proj_weight[0].mask, opt)
    write_update(MaskUpdate(1, {"in_proj_weight.k": np.array([[T, F], [T, T]])},
                            {"in_proj_weight.k": np.array([[T, F], [T, T]])}, False,
                            {"in_proj_weight.k": np.array([[F, F], [T, F]])}), {"in_proj_weight.k": k})
    assert original[:, 0].tolist() == [1.0, 3.0, 5.0, 0.0, 9.0, 11.0]        # row 3 = the second row of k
    assert mha.parametrizations.in_proj_weight[0].mask.tolist() == [[1.0, 1.0]] * 2 + [[1.0, 0.0]] + [[1.0, 1.0]] * 3
    assert (opt.state[original]["exp_avg"] == 0).nonzero().tolist() == [[3, 0]]


def test_an_update_lacking_a_weight_is_refused_before_anything_changes():
    lin, par = parametrized([[1.0, -2.0]], [[T, F]])
    other = ShardStorage(prunable_weights(lin)[0], torch.tensor([[3.0, 0.0]]), torch.tensor([[T, F]]))
    storages = {"weight": storage_of(lin, par), "fc.weight": other}
    with pytest.raises(ValueError, match=r"update.masks must hold a mask for every weight written; it lacks "
                                         r"\['fc.weight'\] \(it holds \['weight'\]\)"):
        write_update(update([[F, F]]), storages)
    release = MaskUpdate(2, {"weight": np.ones((1, 2), bool), "fc.weight": np.ones((1, 2), bool)},
                         {"weight": np.array([[F, F]])}, released=True)
    with pytest.raises(ValueError, match=r"update.keep_values .* lacks \['fc.weight'\]"):
        write_update(release, storages)
    assert lin.parametrizations.weight.original.tolist() == [[1.0, -2.0]] and par.mask.tolist() == [[1.0, 0.0]]


def test_optimizer_state_is_empty_without_an_optimizer_or_state():
    p = torch.nn.Parameter(torch.ones(2))
    assert optimizer_state(None, p) == []
    assert optimizer_state(torch.optim.SGD([p], lr=0.1), p) == []            # no step yet: no state


floats = st.floats(-4, 4, width=32, allow_subnormal=False)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_both_storage_kinds_write_the_same_dense_weights_masks_and_state(data):
    shape = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)))
    cells = shape[0] * shape[1]
    dense = torch.tensor(data.draw(st.lists(floats, min_size=cells, max_size=cells))).view(shape)
    old, new, last, grown = (np.array(data.draw(st.lists(st.booleans(), min_size=cells, max_size=cells)))
                             .reshape(shape) for _ in range(4))
    grown = grown & ~old & data.draw(st.booleans())           # regrowth grows pruned entries, or none
    released = data.draw(st.booleans())
    upd = MaskUpdate(1, {"weight": np.ones(shape, bool) if released else new},
                     {"weight": last if released else new}, released, {"weight": grown})
    layout = prunable_weights(torch.nn.Linear(shape[1], shape[0]))[0]
    old_t = torch.from_numpy(old)
    original, sharded = torch.nn.Parameter(dense.clone()), torch.nn.Parameter(dense * old_t)
    opts = [adam_stepped(original), adam_stepped(sharded)]
    storages = [ParametrizedStorage(layout, original, old_t.float(), opts[0]),
                ShardStorage(layout, sharded, old_t.clone(), dense.masked_fill(old_t, 0), opts[1])]
    for s in storages:
        write_update(upd, {"weight": s})
    masks = [storages[0].mask != 0, storages[1].mask]
    assert torch.equal(masks[0], masks[1]) and np.array_equal(masks[0].numpy(), upd.masks["weight"])
    a, b = storages[0].dense().detach(), storages[1].dense()
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))           # bit for bit, signs of zeros too
    assert torch.equal(sharded.detach(), b * masks[1])
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(opts[0].state[original][key], opts[1].state[sharded][key])


def fsdp_regrowth(rank: int, world: int) -> dict:
    """An FSDP2 Linear (4, 2) on ``world`` ranks: a shard storage over the DTensor weight and its Adam state."""
    from torch.distributed.fsdp import fully_shard

    lin = torch.nn.Linear(2, 4, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(1.0, 9.0).view(4, 2))
    fully_shard(lin)
    opt = adam_stepped(lin.weight)
    local = lin.weight.to_local()
    rows = slice(rank * 4 // world, (rank + 1) * 4 // world)
    layout = prunable_weights(torch.nn.Linear(2, 4))[0]
    shard = ShardStorage(layout, lin.weight, torch.ones_like(local, dtype=torch.bool), torch.zeros_like(local), opt)
    keep, grown = np.array([[T, F], [T, T], [F, T], [T, T]]), np.array([[F, F], [T, F], [F, F], [F, T]])
    write_update(MaskUpdate(1, {"weight": keep[rows]}, {"weight": keep[rows]}, False, {"weight": grown[rows]}),
                 {"weight": shard})
    return {"local": local.tolist(), "stored": shard.stored.tolist(),
            "exp_avg": opt.state[lin.weight]["exp_avg"].to_local().clone()}


@pytest.mark.slow
def test_a_shard_storage_writes_the_local_rows_of_an_fsdp2_weight_and_its_adam_state(tmp_path):
    got = spawn(fsdp_regrowth, 2, tmp_path)
    assert [r["local"] for r in got] == [[[1.0, 0.0], [0.0, 4.0]], [[0.0, 6.0], [7.0, 0.0]]]
    assert [r["stored"] for r in got] == [[[0.0, 2.0], [0.0, 0.0]], [[5.0, 0.0], [0.0, 0.0]]]
    assert_state(got[0]["exp_avg"], [[0.1, 0.1], [0.0, 0.1]])           # rows 0, 1: grown (1, 0)
    assert_state(got[1]["exp_avg"], [[0.1, 0.1], [0.1, 0.0]])           # rows 2, 3: grown (3, 1)
