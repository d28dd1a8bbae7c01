"""`sparsify.cli.report.statistics`: per-tensor sparsity, totals, TF layout guesses and pattern conformity."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sparsify import canonical_to_tf
from sparsify.cli.report.statistics import SparsityReport, build_report, is_optimizer_state
from sparsify.cli.report.tensor_measures import guess_tf_kind, pattern_conformity, tensor_stats


# ----- pattern conformity on literal arrays ------------------------------------------------------
def test_nm_conformity_literal():
    w = np.array([[0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 4.0],
                  [5.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert pattern_conformity(w, "2:4") == {"fits": True, "conforms": True, "units": 4, "violations": 0,
                                            "reason": None}
    w[1, 1] = 7.0                                   # group (1, 0) now keeps 3 of 4
    assert pattern_conformity(w, "2:4")["violations"] == 1
    assert pattern_conformity(w, "2:4")["conforms"] is False
    # 1:4 needs only one zero per group: still fine
    assert pattern_conformity(w, "1:4")["conforms"] is True


def test_block_conformity_literal():
    w = np.ones((8, 2))
    w[0:4, 0] = 0.0                                 # one whole 4x1 block
    assert pattern_conformity(w, "4x1")["conforms"] is True
    assert pattern_conformity(w, "4x1")["units"] == 4
    w[5, 1] = 0.0                                   # a stray zero inside a kept block
    res = pattern_conformity(w, "4x1")
    assert (res["conforms"], res["violations"]) == (False, 1)
    assert pattern_conformity(w, "1x1")["conforms"] is True
    # whole rows ("1xchannel": one row by all columns)
    rows = np.ones((3, 4)); rows[1] = 0.0
    assert pattern_conformity(rows, "1xchannel")["conforms"] is True
    rows[2, 0] = 0.0
    assert pattern_conformity(rows, "1xchannel")["violations"] == 1


def test_conformity_pattern_does_not_fit():
    res = pattern_conformity(np.ones((3, 6)), "2:4")
    assert res["fits"] is False and res["conforms"] is None and "M=4" in res["reason"]


def test_conformity_uses_the_2d_view_of_conv_weights():
    # canonical conv (out=2, in=4, kh=1, kw=2): 2-D view is (2, kw*in) with the input channel fastest
    w = np.ones((2, 4, 1, 2))
    w[:, 0:2, :, :] = 0.0                 # in channels 0,1 zero at every kernel position -> 2:4 per position
    assert pattern_conformity(w, "2:4")["conforms"] is True
    # a reshape with the kernel axis fastest would see groups [0,0,0,0] and [1,1,1,1]: not 2:4
    assert pattern_conformity(w.reshape(2, -1), "2:4")["violations"] == 2
    w2 = np.ones((2, 4, 1, 2)); w2[:, :, :, 0] = 0.0   # kernel position 0 zero: groups of 4 all-zero or all-kept
    assert pattern_conformity(w2, "2:4")["violations"] == 2
    w3 = np.ones((2, 4, 1, 2)); w3[:, 0, :, :] = 0.0   # only one zero per group
    assert pattern_conformity(w3, "2:4")["violations"] == 4


def test_guess_tf_kind():
    assert guess_tf_kind("dense/kernel", (4, 3)) == "dense"
    assert guess_tf_kind("conv2d/kernel", (3, 3, 4, 8)) == "conv"
    assert guess_tf_kind("dw/depthwise_kernel", (3, 3, 4, 1)) == "depthwise"
    assert guess_tf_kind("embedding/embeddings", (10, 4)) == "embedding"
    assert guess_tf_kind("dense/bias", (4,)) is None


def test_tensor_stats_and_format():
    st = tensor_stats("w", np.array([[0.0, 1.0], [0.0, 0.0]]))
    assert (st.zeros, st.size, st.sparsity, st.shape, st.is_weight) == (3, 4, 0.75, (2, 2), True)
    assert tensor_stats("b", np.zeros(3), pattern="2:4").pattern is None      # 1-D: not checked


def test_tf_kernels_are_checked_in_the_canonical_layout():
    canon = np.ones((8, 4, 3, 3))                     # conv (out, in, kh, kw)
    canon[:, 0:2] = 0.0                               # 2:4 along the input channels of every kernel position
    conv_tf = canonical_to_tf(canon, "conv", (3, 3, 4, 8))
    assert tensor_stats("conv/kernel", conv_tf, "2:4", layout="tf").pattern["conforms"] is True
    # read as if canonical, the same array does not conform: the conversion is what makes it right
    assert tensor_stats("conv/kernel", conv_tf, "2:4").pattern["conforms"] is False
    dense = np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 4.0, 0.0]])   # canonical (out=2, in=4)
    st = tensor_stats("dense/kernel", dense.T, "2:4", layout="tf")
    assert (st.shape, st.pattern["conforms"]) == ((4, 2), True)


def test_is_optimizer_state():
    for name in ("dense/kernel/Adam", "dense/kernel/Adam_1", "global_step", "optimizer/iter",
                 "beta1_power", "save_counter", "model/.OPTIMIZER_SLOT/fc/kernel/m"):
        assert is_optimizer_state(name), name
    for name in ("dense/kernel", "fc.weight", "conv/depthwise_kernel", "adam_layer/kernel"):
        assert not is_optimizer_state(name), name


def test_totals_and_pattern_verdict():
    rep = SparsityReport("x.npz", "npz", "2:4", [
        tensor_stats("a", np.array([[0.0, 1.0, 0.0, 2.0]]), "2:4"),       # conforms
        tensor_stats("b", np.zeros(4), "2:4"),                              # 1-D: counted, not checked
        tensor_stats("c", np.ones((3, 6)), "2:4"),                          # does not fit: not part of the verdict
    ])
    d = rep.to_dict()
    assert d["total"] == {"tensors": 3, "size": 26, "zeros": 6, "sparsity": 6 / 26}
    assert d["weights_total"] == {"tensors": 2, "size": 22, "zeros": 2, "sparsity": 2 / 22}
    assert d["pattern_conforms"] is True
    rep.tensors.append(tensor_stats("d", np.array([[0.0, 1.0, 1.0, 1.0]]), "2:4"))
    assert rep.to_dict()["pattern_conforms"] is False
    assert "pattern_conforms" not in SparsityReport("x.npz", "npz", None, rep.tensors).to_dict()


def test_build_report_leaves_out_optimizer_state_and_counters(tmp_path):
    np.savez(tmp_path / "w.npz", **{"fc/kernel": np.zeros((2, 2)), "fc/kernel/Adam": np.ones((2, 2)),
                                    "step": np.array(3)})
    assert [t.name for t in build_report(tmp_path / "w.npz").tensors] == ["fc/kernel"]
    names = [t.name for t in build_report(tmp_path / "w.npz", include_optimizer=True).tensors]
    assert names == ["fc/kernel", "fc/kernel/Adam"]
    np.savez(tmp_path / "slots.npz", **{"fc/kernel/Adam": np.ones((2, 2))})
    with pytest.raises(ValueError, match="holds only optimizer state"):
        build_report(tmp_path / "slots.npz")


def test_report_json_roundtrip(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.zeros((2, 4)))
    d = build_report(tmp_path / "w.npz", pattern="2:4").to_dict()
    assert json.loads(json.dumps(d)) == d
