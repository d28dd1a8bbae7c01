"""`sparsify report` of an int8 .npz (`sparsify export --int8`, `save_int8_npz`): per tensor its sparsity, whether it
is stored as int8 and its bytes; a plain .npz that only shares the member name is read as a plain .npz."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sparsify.cli import main
from sparsify.cli.report import build_report, format_report, read_tensors
from sparsify.cli.report.int8_npz import int8_npz_stats, int8_npz_tensors, is_int8_members, read_int8_document
from sparsify.int8_format import compress_int8, decompress_int8, int8_npz_bytes, save_int8_npz


def _weights():
    w = np.zeros((8, 16), np.float32)
    w[:, ::4] = np.arange(1, 33, dtype=np.float32).reshape(8, 4) / 8        # 75% zeros, 1:4 in each row
    return {"fc.weight": w, "fc.bias": np.arange(8, dtype=np.float32), "steps": np.int64(3)}


def test_report_of_an_int8_file_gives_sparsity_int8_tensors_and_bytes(tmp_path):
    f = tmp_path / "m.int8.npz"
    save_int8_npz(f, compress_int8(_weights()))
    rep = build_report(f, pattern="2:4")
    d = rep.to_dict()
    w, b = d["tensors"]                               # the scalar counter is left out, as for every file
    assert (w["name"], w["dtype"], w["shape"], w["zeros"], w["sparsity"]) == ("fc.weight", "int8", [8, 16], 96, 0.75)
    assert (w["encoding"], w["stored_bytes"]) == ("bitmask_int8", 16 + 32 + 4 * 8)   # bits + values + scales
    assert w["pattern"]["conforms"] is True
    assert (b["name"], b["dtype"], b["zeros"], b["encoding"], b["stored_bytes"]) == ("fc.bias", "float32", 1,
                                                                                     "dense", 8 * 4)
    assert d["int8_tensors"] == ["fc.weight"] and d["stored_bytes"] == 80 + 32
    lines = format_report(rep).splitlines()
    assert lines[0] == (f"{f} (npz), 2 tensors, 1 stored as int8 (112 bytes stored before the file's deflate, "
                        f"{f.stat().st_size} bytes on disk)")
    assert lines[1].split() == ["name", "shape", "dtype", "sparsity", "zeros", "/", "size", "stored", "as", "bytes",
                                "2:4"]
    assert lines[3].split() == ["fc.weight", "8x16", "int8", "75.00%", "96", "/", "128", "bitmask_int8", "80", "yes"]
    assert lines[4].split() == ["fc.bias", "8", "float32", "12.50%", "1", "/", "8", "dense", "32", "-"]
    assert lines[6].split() == ["total", "(all", "tensors)", "71.32%", "97", "/", "136", "112"]
    assert lines[7].split() == ["total", "(weights,", "rank", ">=", "2)", "75.00%", "96", "/", "128", "80"]
    assert lines[-1] == "pattern 2:4: every weight that fits it conforms"


@pytest.mark.slow
def test_the_cli_reports_a_file_that_sparsify_export_int8_wrote(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    import sparsify_torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    pruner = sparsify_torch.prune(model, {"target_sparsity": 0.9, "start_step": 0, "end_step": 0})
    pruner.remove()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    assert main(["export", str(tmp_path / "model.pt"), "--int8", "--json"]) == 0
    capsys.readouterr()
    out = tmp_path / "model.int8.npz"
    assert main(["report", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in d["tensors"]}
    assert d["int8_tensors"] == ["0.weight", "2.weight"]
    for name in d["int8_tensors"]:
        w = model.state_dict()[name].numpy()
        assert by_name[name]["zeros"] == int((w == 0).sum()) == round(0.9 * w.size)       # every pruned zero
        assert by_name[name]["encoding"] == "bitmask_int8" and by_name[name]["dtype"] == "int8"
    assert by_name["0.bias"]["dtype"] == "float32" and by_name["0.bias"]["encoding"] in ("dense", "bitmask")
    assert d["stored_bytes"] == sum(t["stored_bytes"] for t in d["tensors"]) < out.stat().st_size * 2
    assert d["weights_total"]["sparsity"] == pytest.approx(0.9, abs=1e-3)
    assert main(["report", str(out)]) == 0
    table = capsys.readouterr().out
    assert ", 2 stored as int8 (" in table.splitlines()[0] and "bitmask_int8" in table


def test_read_tensors_gives_the_dequantized_weights(tmp_path):
    f = tmp_path / "m.int8.npz"
    doc = compress_int8(_weights())
    save_int8_npz(f, doc)
    fmt, tensors = read_tensors(f)
    assert fmt == "npz" and sorted(tensors) == ["fc.bias", "fc.weight", "steps"]
    dense = decompress_int8(doc)
    assert all(np.array_equal(tensors[n], dense[n]) for n in dense)
    assert np.array_equal(tensors["fc.weight"] == 0, _weights()["fc.weight"] == 0)
    back, dense2 = int8_npz_tensors(f)
    assert list(back["tensors"]) == list(doc["tensors"]) and dense2.keys() == dense.keys()


def test_a_plain_npz_with_an_int8_member_is_read_as_a_plain_npz(tmp_path):
    f = tmp_path / "plain.npz"
    np.savez(f, int8=np.array([[0, 1], [2, 0]], np.uint8))
    assert is_int8_members(["int8"]) and read_int8_document(f) is None and int8_npz_stats(f) is None
    rep = build_report(f)
    assert [(t.name, t.dtype, t.zeros, t.encoding) for t in rep.tensors] == [("int8", "uint8", 2, None)]
    assert "int8_tensors" not in rep.to_dict() and "encoding" not in rep.to_dict()["tensors"][0]
    assert "stored as" not in format_report(rep)


def test_version_1_files_are_reported_and_a_broken_one_is_refused(tmp_path):
    v1 = {"__format__": np.array("sparsify.compressed_int8_state_dict"), "__version__": np.array(1),
          "__index__": np.array("{}"), "__blob__": np.zeros(3, np.uint8)}
    assert is_int8_members(v1) and not is_int8_members(["__format__", "__version__", "t0/name"])
    np.savez(tmp_path / "broken.npz", **v1)
    with pytest.raises(ValueError, match="broken.npz"):
        build_report(tmp_path / "broken.npz")
    f = tmp_path / "v2.int8.npz"
    f.write_bytes(int8_npz_bytes(compress_int8(_weights())))
    with pytest.raises(ValueError, match="declared|more than|max"):
        build_report(f, max_bytes=64)
