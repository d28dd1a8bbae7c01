"""`sparsify_torch.export`: compressed state_dicts that `torch.load(weights_only=True)` reads, and the 2:4
semi-structured check that needs no GPU (its rules are torch's own)."""
from __future__ import annotations

import io

import pytest
import torch

from sparsify_torch.export import (SEMI_STRUCTURED_TILES, load_compressed_state_dict, save_compressed_state_dict,
                                   semi_structured_report, semi_structured_violation)


def test_round_trip_all_dtypes_into_a_fresh_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.Linear(64, 8))
    with torch.no_grad():
        model[0].weight[torch.rand_like(model[0].weight) < 0.8] = 0
    model = model.to(torch.bfloat16)
    buf = io.BytesIO()
    counts = save_compressed_state_dict(model, buf)
    assert counts["tensors"] == len(model.state_dict()) and counts["bitmask"] >= 1
    buf.seek(0)
    sd = load_compressed_state_dict(buf)
    assert sd["0.weight"].dtype == torch.bfloat16 and sd["1.num_batches_tracked"].dtype == torch.int64
    fresh = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64),
                                torch.nn.Linear(64, 8)).to(torch.bfloat16)
    fresh.load_state_dict(sd)
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_not_a_compressed_file():
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    buf.seek(0)
    with pytest.raises(ValueError, match="not a compressed state_dict"):
        load_compressed_state_dict(buf)
    with pytest.raises(TypeError, match="expected an nn.Module or a state_dict"):
        save_compressed_state_dict(["w"], io.BytesIO())


def test_tiles_are_torchs():
    from torch.sparse import SparseSemiStructuredTensorCUSPARSELT, SparseSemiStructuredTensorCUTLASS

    for name, cls in (("cutlass", SparseSemiStructuredTensorCUTLASS), ("cusparselt", SparseSemiStructuredTensorCUSPARSELT)):
        theirs = {dt: (c.sparse_min_rows, c.sparse_min_cols) for dt, c in cls._DTYPE_SHAPE_CONSTRAINTS.items()}
        assert theirs == SEMI_STRUCTURED_TILES[name]


def test_semi_structured_violations_literal():
    w = torch.zeros(32, 64, dtype=torch.float16)
    w[:, 0::4] = 1
    w[:, 1::4] = 2
    assert semi_structured_violation(w) is None
    w[3, 2] = 1                                                    # a third non-zero in one group
    assert semi_structured_violation(w) == "1 of 512 groups of 4 hold more than 2 non-zeros"
    assert semi_structured_violation(torch.zeros(16, 64, dtype=torch.float16), backend="cutlass") == \
        "shape 16x64: cutlass needs rows and columns multiples of 32x64"
    assert semi_structured_violation(torch.zeros(16, 64, dtype=torch.float16)) is None      # cuSPARSELt takes 16x16
    assert semi_structured_violation(torch.zeros(64, 64, dtype=torch.float64)) == \
        "shape 64x64: cutlass does not take float64; cusparselt does not take float64"
    assert semi_structured_violation(torch.zeros(2, 3, 4, 4)).startswith("a 4-D tensor")
    conv_and_linear = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.Flatten(), torch.nn.Linear(64, 32))
    assert list(semi_structured_report(conv_and_linear)) == ["2.weight"]
    with pytest.raises(ValueError, match="backend must be one of"):
        semi_structured_violation(w, backend="cusparse")
