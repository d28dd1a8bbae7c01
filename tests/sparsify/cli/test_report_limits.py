"""`sparsify report` on hostile and broken files: pipes, declared sizes, caps, incomplete SavedModels and
checkpoints, a format that contradicts the content, a pattern that fits nothing (issue 15). Every case is one
line on stderr, never "internal error"."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import shutil
import threading
import zipfile

import numpy as np
import pytest

from sparsify.cli import main
from sparsify.cli.report import build_report, format_report
from sparsify.cli.report.readers import PRUNED_MODEL_FORMAT, read_tensors


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(capsys, *args: str) -> str:
    rc, out, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and "internal error" not in err and "Traceback" not in err, (rc, out, err)
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipe_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "weights.pt"
    os.mkfifo(fifo)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("err", one_line_error(capsys, "report", str(fifo))))
    t.start()
    t.join(30)
    assert not t.is_alive(), "report blocked on a named pipe"
    assert "is a named pipe, not a regular file" in result["err"]


def test_declared_sizes_are_checked_before_reading(tmp_path, capsys):
    # a 128 KB zip whose .npy header declares 2 GiB of float64
    bomb = tmp_path / "bomb.npz"
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (268435456,), }"
    header += b" " * (64 - (10 + len(header) + 1) % 64) + b"\n"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(1 << 17))
    err = one_line_error(capsys, "report", str(bomb))
    assert "declares 2.0 GiB of tensors, more than the cap of 1.0 GiB; pass --max-bytes 2147483648" in err
    err = one_line_error(capsys, "report", str(bomb), "--max-bytes", "1000000")      # the cap is overridable
    assert "more than the cap of 976.6 KiB" in err
    # an honest file under the cap is read; over it, the same clear refusal
    ok = tmp_path / "ok.npz"
    np.savez(ok, w=np.zeros((100, 100), np.float32))
    assert run(capsys, "report", str(ok), "--max-bytes", "40000")[0] == 0
    assert "declares 39.1 KiB of tensors, more than the cap of 39.1 KiB" in one_line_error(
        capsys, "report", str(ok), "--max-bytes", "39999")
    assert "must be a positive number of bytes" in _usage(capsys, "report", str(ok), "--max-bytes", "0")


def _usage(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    assert e.value.code == 2
    return capsys.readouterr().err


def test_torch_and_keras_declared_sizes(tmp_path, capsys):
    import torch

    torch.save({"w": torch.zeros(256, 256)}, tmp_path / "m.pt")
    assert "more than the cap" in one_line_error(capsys, "report", str(tmp_path / "m.pt"), "--max-bytes", "1000")
    assert run(capsys, "report", str(tmp_path / "m.pt"), "--max-bytes", "300000")[0] == 0


def test_format_that_contradicts_the_content(tmp_path, capsys):
    import torch

    torch.save({"w": torch.zeros(2, 2)}, tmp_path / "model.pt")
    err = one_line_error(capsys, "report", str(tmp_path / "model.pt"), "--format", "npz")
    assert err.endswith(f"--format npz does not match {str(tmp_path / 'model.pt')!r}, which is a torch file; "
                        "drop --format or pass --format torch")
    with pytest.raises(ValueError, match="not an .npz archive: it holds .* it is a torch file"):
        from sparsify.cli.report.npz_reader import read_npz      # the reader itself, bypassing detection
        read_npz(str(tmp_path / "model.pt"), None)


def test_pattern_that_fits_nothing_says_so(tmp_path, capsys):
    np.savez(tmp_path / "w.npz", a=np.zeros((4, 8)), b=np.zeros((8, 4)))
    rep = build_report(tmp_path / "w.npz", pattern="3x1")
    assert rep.to_dict()["pattern_conforms"] is None and rep.to_dict()["pattern_checked"] == 0
    last = format_report(rep).splitlines()[-1]
    assert last == "pattern 3x1: fits none of the weights (see the 'skipped: does not fit' cells), so nothing was checked"
    assert "NOT every" not in format_report(rep)
    rc, out, _ = run(capsys, "report", str(tmp_path / "w.npz"), "--pattern", "4x1", "--json")
    assert rc == 0 and json.loads(out)["pattern_conforms"] is True


def _tf_checkpoint(tmp_path):
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(w=tf.Variable(np.ones((64, 64), np.float32)), b=tf.Variable(np.zeros(8, np.float32)))
    return ckpt.write(str(tmp_path / "ckpt" / "model"))


def test_truncated_or_missing_checkpoint_shard_is_incomplete(tmp_path, capsys):
    prefix = _tf_checkpoint(tmp_path)
    data = next(p for p in (tmp_path / "ckpt").iterdir() if ".data-" in p.name)
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size // 2)
    err = one_line_error(capsys, "report", prefix)
    assert "incomplete TensorFlow checkpoint: tensor" in err and "missing or truncated" in err
    data.unlink()
    assert "incomplete" in one_line_error(capsys, "report", prefix) or "cannot be read" in \
        one_line_error(capsys, "report", prefix)
    err = one_line_error(capsys, "report", prefix)
    assert "incomplete TensorFlow checkpoint: tensor" in err and "No such file or directory" in err, err
    assert err.endswith(f"a data shard ({prefix}.data-*) is missing or truncated"), err
    # its directory (ckpt.write leaves no 'checkpoint' state file) names the prefix and the missing shard
    err = one_line_error(capsys, "report", str(tmp_path / "ckpt"))
    assert "is missing its 'checkpoint' state file" in err and "holds 1 checkpoint (model [no .data shard])" in err


def test_saved_model_without_variables_is_incomplete(tmp_path, capsys):
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.ones((4, 4), np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return tf.matmul(x, self.w)

    d = tmp_path / "sm"
    tf.saved_model.save(M(), str(d))
    assert build_report(d).to_dict()["weights_total"]["size"] == 16
    shutil.rmtree(d / "variables")
    err = one_line_error(capsys, "report", str(d))
    assert "incomplete SavedModel: its graph has 1 variables" in err and "variables/ is missing" in err


def test_structured_and_compressed_files_are_read(tmp_path, capsys):
    import torch

    from sparsify_torch.channels.serialization import FORMAT, save_pruned_model
    from sparsify_torch.export import save_compressed_state_dict

    assert PRUNED_MODEL_FORMAT == FORMAT
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        net[0].weight[:, :4] = 0
    save_pruned_model(net, tmp_path / "p.pt")
    fmt, tensors = read_tensors(tmp_path / "p.pt")
    assert fmt == "torch" and sorted(tensors) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    save_compressed_state_dict(net, tmp_path / "c.pt")
    rc, out, _ = run(capsys, "report", str(tmp_path / "c.pt"), "--json")
    by = {t["name"]: t for t in json.loads(out)["tensors"]}
    assert rc == 0 and by["0.weight"]["zeros"] == 32 and by["0.weight"]["shape"] == [8, 8]


def test_checkpoint_directory_without_its_state_file_says_what_is_missing(tmp_path, capsys):
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(w=tf.Variable(np.ones((4, 4), np.float32)))
    manager = tf.train.CheckpointManager(ckpt, str(tmp_path / "ckpts"), max_to_keep=3)
    manager.save()
    manager.save()
    (tmp_path / "ckpts" / "checkpoint").unlink()
    err = one_line_error(capsys, "report", str(tmp_path / "ckpts"))
    assert "is missing its 'checkpoint' state file (which names the latest checkpoint) and holds 2 checkpoints " \
           "(ckpt-1, ckpt-2); pass one prefix, e.g. " in err and err.endswith("ckpt-2'"), err
    # the state file names a checkpoint whose files are gone
    (tmp_path / "ckpts" / "checkpoint").write_text('model_checkpoint_path: "ckpt-9"\n')
    err = one_line_error(capsys, "report", str(tmp_path / "ckpts"))
    assert "its 'checkpoint' state file names 'ckpt-9', but" in err and "ckpt-9.index' is missing" in err, err
    # a run directory holding a checkpoint/ directory (the demo's --out) is not itself a checkpoint
    shutil.copytree(tmp_path / "ckpts", tmp_path / "run" / "checkpoint")
    err = one_line_error(capsys, "report", str(tmp_path / "run"))
    assert "no 'checkpoint' state file and no *.index file); it holds the directories checkpoint/: pass one of them" \
        in err, err
