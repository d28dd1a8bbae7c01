"""sparsify.cli.report.npz_stream: .npz statistics in bounded chunks (issue 28: memory must not grow with the
declared size), equal to the statistics of the whole array."""
from __future__ import annotations

import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.cli import main
from sparsify.cli.report import build_report, pattern_conformity, tensor_stats
from sparsify.cli.report.npz_stream import iter_row_chunks, npz_members, streamed_tensor_stats


def _write_large_zero_npz(path, rows: int, cols: int, nonzero_rows: int) -> None:
    """A deflated .npz of a float32 (rows, cols) array, written a row band at a time (never whole in memory):
    the first ``nonzero_rows`` rows are ones, the rest zeros."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (rows, cols)}
    band = 256
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("w.npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for start in range(0, rows, band):
            n = min(band, rows - start)
            block = np.zeros((n, cols), np.float32)
            block[: max(0, min(n, nonzero_rows - start))] = 1.0
            fh.write(block.tobytes())


@pytest.mark.slow
def test_a_large_compressible_array_is_reported_in_bounded_memory(tmp_path, capsys):
    rows, cols = 16384, 4096                             # 256 MiB declared, a few hundred KiB on disk
    path = tmp_path / "big.npz"
    _write_large_zero_npz(path, rows, cols, nonzero_rows=4)
    assert path.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        rc = main(["report", str(path), "--pattern", "2:4", "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert rc == 0, out
    assert peak < 48 << 20, f"peak {peak / 2**20:.1f} MiB for a 256 MiB array"
    import json
    (t,) = json.loads(out)["tensors"]
    assert t["shape"] == [rows, cols] and t["zeros"] == rows * cols - 4 * cols
    assert t["pattern"] == {"fits": True, "conforms": False, "units": rows * cols // 4, "violations": cols,
                            "reason": None}


def test_truncated_member_fails_with_its_name(tmp_path, capsys):
    path = tmp_path / "short.npz"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 10), }"
    header += b" " * (64 - (10 + len(header) + 1) % 64) + b"\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(400))
    assert main(["report", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "array 'w' is truncated" in err[0], err


def test_chunks_follow_rows_and_flat_members(tmp_path):
    f = tmp_path / "w.npz"
    np.savez(f, m=np.arange(24.0).reshape(6, 2, 2), v=np.arange(5.0), fo=np.asfortranarray(np.ones((3, 4))))
    by = {m.name: m for m in npz_members(f)}
    chunks = list(iter_row_chunks(f, by["m"], chunk_bytes=70, row_multiple=2))
    assert [c.shape for c in chunks] == [(2, 2, 2), (2, 2, 2), (2, 2, 2)]
    np.testing.assert_array_equal(np.concatenate(chunks), np.arange(24.0).reshape(6, 2, 2))
    assert [c.shape for c in iter_row_chunks(f, by["v"], chunk_bytes=16)] == [(2,), (2,), (1,)]
    assert by["fo"].fortran_order and sum(c.size for c in iter_row_chunks(f, by["fo"], chunk_bytes=8)) == 12


@settings(max_examples=60, deadline=None)
@given(rows=st.sampled_from([1, 2, 4, 6, 8]), cols=st.sampled_from([4, 8, 12]), rank3=st.booleans(),
       pattern=st.sampled_from(["1x1", "2:4", "1:4", "2x2", "4x1", "1x4", "channelx1", "channelx2", "1xchannel",
                                "2xchannel", "3x1"]),
       chunk_bytes=st.sampled_from([1, 8, 40, 1 << 20]), seed=st.integers(0, 2**16))
def test_streamed_stats_equal_whole_array_stats(tmp_path_factory, rows, cols, rank3, pattern, chunk_bytes, seed):
    rng = np.random.default_rng(seed)
    shape = (rows, cols // 2, 2) if rank3 else (rows, cols)
    w = rng.normal(size=shape) * (rng.random(shape) < 0.5)
    w[rng.random(rows) < 0.3] = 0.0                      # whole zero rows make some structured units conform
    f = tmp_path_factory.mktemp("npz") / "w.npz"
    np.savez_compressed(f, w=w)
    streamed = streamed_tensor_stats(f, npz_members(f)[0], pattern, chunk_bytes=chunk_bytes)
    whole = tensor_stats("w", w, pattern)
    assert streamed == whole
    assert streamed.pattern == pattern_conformity(w, pattern)


def test_build_report_of_npz_matches_loaded_arrays(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.array([[0.0, 1.0, 0.0, 1.0]]), b=np.ones(3), n=np.int64(3))
    rep = build_report(tmp_path / "w.npz", pattern="2:4").to_dict()
    assert [t["name"] for t in rep["tensors"]] == ["a", "b"]
    assert rep["total"] == {"tensors": 2, "size": 7, "zeros": 2, "sparsity": 2 / 7} and rep["pattern_conforms"]
