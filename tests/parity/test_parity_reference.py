"""The reference and the zoo, checked on their own: literal masks of the rules of docs/design.md on small
inputs, and the zoo really exercises what the parity tests claim (ties across layers decide the
global masks, the per-layer cap binds, N:M groups straddle kernel taps, the test's layout copies
are checked by forward outputs)."""
import numpy as np
import pytest
from parity_reference import (NofM, exact_count, global_masks, gradual_sparsity, local_masks, mask_history,
                              parse_pattern, picture, units, update_ready)
from parity_zoo import (GRAPH_LAYERS, KERAS_LAYERS, LAYERS, SCHEDULE, STEPS, config, keras_view, to_keras,
                        torch_view, torch_weight, torch_zoo, views)

# docs/core.md, "Channel names on a 4x6 weight"
W46 = np.array([[0.1, 5.0, 0.2, 6.0, 0.3, 7.0],
                [0.4, 5.0, 0.5, 6.0, 0.6, 7.0],
                [0.7, 5.0, 0.8, 6.0, 0.9, 7.0],
                [9.0, 9.0, 9.0, 9.0, 9.0, 9.0]])


@pytest.mark.parametrize("pattern, sparsity, expected", [
    ("channelx1", 0.5, [". x . x . x"] * 4),
    ("1xchannel", 0.5, [". . . . . ."] * 2 + ["x x x x x x"] * 2),
    ("channelx2", 1 / 3, [". . x x x x"] * 4),
    ("2xchannel", 0.5, [". . . . . ."] * 2 + ["x x x x x x"] * 2),
    ("1x2", 0.5, [". . . . x x"] * 3 + ["x x x x x x"]),        # pair sums 5.1 .. 7.9, row 3: 18
    ("2x2", 0.5, [". . . . . ."] * 2 + ["x x x x x x"] * 2),    # 10.5 12.7 14.9 / 23.7 24.8 25.9
])
def test_block_patterns_on_the_documented_4x6_weight(pattern, sparsity, expected):
    assert picture(local_masks({"w": W46}, pattern, sparsity)["w"]).splitlines() == expected


def test_exact_counts_round_half_down_and_keep_one_unit():
    assert [exact_count(s, 10) for s in (0.0, 0.04, 0.05, 0.25, 0.26, 0.96, 0.99)] == [0, 0, 0, 2, 3, 9, 9]
    ones = np.ones((1, 4))
    assert local_masks({"w": ones}, "1x1", 0.9)["w"].tolist() == [[False, False, False, True]]


def test_ties_go_to_the_lower_flat_index_of_the_2d_view():
    # a (out=1, in=2, kh=1, kw=2) conv with equal weights: the view is (kw, in) with in fastest,
    # so half of it is the first kernel tap of both input channels
    w = np.ones((1, 2, 1, 2))
    mask_view = local_masks({"w": torch_view("conv", w)}, "1x1", 0.5)["w"]
    assert mask_view.tolist() == [[False, False, True, True]]
    index = np.arange(4).reshape(1, 2, 1, 2)          # torch index of each view column
    assert torch_view("conv", index).tolist() == [[0, 2, 1, 3]]


def test_nm_groups_run_along_the_view_and_straddle_kernel_taps():
    # conv with 3 input channels and a 2x2 kernel: group 1 of "2:4" holds tap 1's channels 1, 2
    # and tap 2's channels 0, 1
    index = np.arange(12).reshape(1, 3, 2, 2)         # (out, in, kh, kw)
    view = torch_view("conv", index)
    groups = [view.ravel()[g].tolist() for g in units(view.shape, NofM(2, 4))]
    assert groups == [[0, 4, 8, 1], [5, 9, 2, 6], [10, 3, 7, 11]]


def test_nm_prunes_the_lowest_fraction_of_groups_and_all_of_them_at_n_over_m():
    w = np.array([[4., 3., 2., 1., 9., 9., 1., 9., 5., 0.5, 5., 5.]])
    # group sums of the 2 smallest: 3, 10, 5.5; r = 0.25 -> half of 3 groups = 1.5 -> 1 (halves round down):
    # the lowest; within a group the 2 smallest, ties (the 5s, the 9s) to the lower index
    assert picture(local_masks({"w": w}, "2:4", 0.25)["w"]) == "x x . . x x x x x x x x"
    assert picture(local_masks({"w": w}, "2:4", 0.34)["w"]) == "x x . . x x x x . . x x"   # 2.04 -> 2
    assert picture(local_masks({"w": w}, "2:4", 0.5)["w"]) == "x x . . . x . x . . x x"
    assert picture(local_masks({"w": w}, "1:4", 0.25)["w"]) == "x x x . x x . x x . x x"
    with pytest.raises(ValueError):
        local_masks({"w": w}, "1:4", 0.3)


def test_monotone_a_pruned_unit_stays_pruned():
    before = local_masks({"w": np.array([[1., 2., 3., 4.]])}, "1x1", 0.25)["w"]
    after = local_masks({"w": np.array([[9., 2., 3., 4.]])}, "1x1", 0.5, {"w": before})["w"]
    assert picture(before) == ". x x x" and picture(after) == ". . x x"


def test_global_threshold_ties_in_layer_order_and_the_per_layer_cap():
    a, b = np.ones((1, 100)), np.ones((1, 100))
    masks = global_masks({"a": a, "b": b}, "1x1", 0.5)          # 100 of 200; a first, capped at 98
    assert [int((~m).sum()) for m in masks.values()] == [98, 2]
    masks = global_masks({"b": b, "a": a}, "1x1", 0.5)
    assert [int((~masks[n]).sum()) for n in ("a", "b")] == [2, 98]
    low, high = np.full((10, 12), 0.001), np.ones((10, 12))
    masks = global_masks({"low": low, "high": high}, "1x1", 0.5)   # 120 of 240; low capped at 118
    assert [int((~m).sum()) for m in masks.values()] == [118, 2]
    masks = global_masks({"low": low, "high": high}, "2:4", 0.3)   # 36 of 60 groups, N:M uncapped
    assert [int((~m).sum()) for m in masks.values()] == [60, 12]


def test_schedule_values_and_update_points():
    assert [s for s in range(STEPS) if update_ready(s, SCHEDULE)] == [1, 3, 5, 7]
    values = [gradual_sparsity(s, SCHEDULE) for s in range(STEPS)]
    assert values[0] == 0.0 and values[1] == 0.1 and values[7] == values[8] == 0.5
    assert values[3] == pytest.approx(0.1 + 0.4 * 19 / 27) and values[5] == pytest.approx(0.1 + 0.4 * 26 / 27)


# ----- the zoo exercises what the parity tests claim --------------------------------------------

ZOO_PATTERNS = ["1x1", "2x2", "channelx2", "2xchannel", "2:4"]


@pytest.mark.parametrize("layers", [LAYERS, KERAS_LAYERS, GRAPH_LAYERS], ids=["torch", "keras", "tf_graph"])
@pytest.mark.parametrize("pattern", ZOO_PATTERNS)
def test_zoo_global_masks_depend_on_the_layer_order(pattern, layers):
    """Equal scores in different layers sit at the global threshold: another layer order gives
    other masks, so the parity tests check the order each framework hands to the core."""
    cfg = config(pattern, "global")
    forward = mask_history(views(torch_zoo(), layers), cfg, STEPS)
    backward = mask_history(views(torch_zoo(), layers[::-1]), cfg, STEPS)
    assert any((f[n] != b[n]).any() for f, b in zip(forward, backward) for n in f)


@pytest.mark.parametrize("pattern", ["1x1", "2x2", "channelx2", "2xchannel"])
def test_zoo_global_scope_clamps_the_tiny_layer(pattern):
    final = mask_history(views(torch_zoo(), LAYERS), config(pattern, "global"), STEPS)[-1]
    tiny = final["tiny.weight"]
    n_units = len(units(tiny.shape, parse_pattern(pattern)))
    unit_size = tiny.size // n_units
    assert int((~tiny).sum()) == exact_count(0.98, n_units) * unit_size


def test_zoo_ties_inside_layers_decide_local_masks():
    """Breaking ties towards the higher index (flip every view, prune, flip back) gives other masks."""
    cfg = config("1x1", "local")
    straight = mask_history(views(torch_zoo(), LAYERS), cfg, STEPS)[-1]
    flipped = mask_history({n: v[::-1, ::-1] for n, v in views(torch_zoo(), LAYERS).items()}, cfg, STEPS)[-1]
    differ = [n for n in straight if (straight[n] != flipped[n][::-1, ::-1]).any()]
    assert len(differ) > len(LAYERS) // 2, differ


@pytest.mark.parametrize("layer", KERAS_LAYERS, ids=lambda layer: layer.name)
def test_zoo_keras_copies_have_the_same_2d_view(layer):
    w = torch_weight(torch_zoo(), layer)
    np.testing.assert_array_equal(keras_view(layer.kind, to_keras(layer.kind, w)),
                                  torch_view(layer.kind, w, layer.groups))


def test_grouped_conv_transpose_view():
    """ConvTranspose2d(4 -> 2, groups 2): output channel o reads only its group's input channels."""
    w = np.arange(4 * 1 * 1 * 1).reshape(4, 1, 1, 1)          # (in, out/groups, kh, kw)
    assert torch_view("conv_transpose", w, groups=2).tolist() == [[0, 1], [2, 3]]
    w = np.arange(2 * 3).reshape(2, 3, 1)                    # (in=2, out=3, k=1), groups 1
    assert torch_view("conv_transpose", w).tolist() == [[0, 3], [1, 4], [2, 5]]


def test_forward_check_rejects_a_wrong_copy():
    """The forward check that guards every copy sees a kh<->kw swap of a square kernel."""
    import tensorflow as tf
    import torch

    model = torch_zoo()
    x = np.random.default_rng(0).normal(size=(1, 5, 5, 3)).astype(np.float32)
    with torch.no_grad():
        ref = model.conv2d(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy().transpose(0, 2, 3, 1)
    kernel = to_keras("conv", model.conv2d.weight.detach().numpy())
    bias = model.conv2d.bias.detach().numpy()
    right = tf.nn.conv2d(x, kernel, 1, "VALID").numpy() + bias
    wrong = tf.nn.conv2d(x, kernel.swapaxes(0, 1), 1, "VALID").numpy() + bias
    np.testing.assert_allclose(right, ref, rtol=1e-5, atol=1e-5)
    assert not np.allclose(wrong, ref, rtol=1e-5, atol=1e-5)
