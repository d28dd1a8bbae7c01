"""RowShard: which rows of dim 0 a rank holds, checked on construction; chunks as torch.chunk splits them."""
from __future__ import annotations

import pytest

from sparsify.distributed import RowShard


def test_row_shard_validation():
    with pytest.raises(ValueError, match=r"0 <= start <= stop <= shape\[0\] = 4"):
        RowShard((4, 4), 3, 5)
    with pytest.raises(ValueError, match="count must be a positive integer"):
        RowShard.chunk((4, 4), 0, 0)
    assert [RowShard.chunk((5, 2), r, 4).rows for r in range(4)] == [2, 2, 1, 0]
    assert RowShard.whole((3, 2)).local_shape == (3, 2)


def test_chunks_tile_the_rows_like_torch_chunk():
    parts = [RowShard.chunk((7, 3), r, 3) for r in range(3)]
    assert [(p.start, p.stop) for p in parts] == [(0, 3), (3, 6), (6, 7)]
    assert [p.local_shape for p in parts] == [(3, 3), (3, 3), (1, 3)]
    with pytest.raises(ValueError, match=r"index must be an integer in \[0, 3\)"):
        RowShard.chunk((7, 3), 3, 3)
    with pytest.raises(TypeError, match="start must be an integer"):
        RowShard((7, 3), 1.0, 2)
