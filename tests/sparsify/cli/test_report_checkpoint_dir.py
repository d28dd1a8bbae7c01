"""sparsify.cli.report.checkpoint_dir: a checkpoint directory is read through its `checkpoint` state file; one
without it (a copied run, a deleted state file) is refused naming what is missing and the prefix to pass
(issue 28), for tf.compat.v1 Saver and TF2 tf.train.Checkpoint directories alike."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.cli import main
from sparsify.cli.report.checkpoint_dir import (checkpoint_prefixes, data_shard_prefixes,
                                                directory_checkpoint_prefix)

MISSING = "is missing its 'checkpoint' state file (which names the latest checkpoint)"


def report(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["report", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(capsys, path) -> str:
    """`sparsify report PATH` must exit 1 with one line on stderr and nothing on stdout; that line."""
    rc, out, err = report(capsys, str(path))
    lines = err.strip().splitlines()
    assert rc == 1 and out == "" and len(lines) == 1 and "internal error" not in err, (rc, out, err)
    assert lines[0].startswith("sparsify report: error: "), lines
    return lines[0][len("sparsify report: error: "):]


def _saver_checkpoints(d, steps) -> None:
    """tf.compat.v1 Saver checkpoints of a 4x4 kernel with half its entries zero, at each global step."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        tf1.get_variable("fc1/kernel", initializer=np.repeat([[0.0, 1.0]], 8, axis=0).reshape(4, 4).astype(np.float32))
        gs = tf1.train.get_or_create_global_step()
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for step in steps:
                sess.run(gs.assign(step))
                saver.save(sess, os.path.join(d, "model.ckpt"), global_step=step)


def _tf2_checkpoints(d, count) -> None:
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(w=tf.Variable(np.eye(3, dtype=np.float32)))
    for _ in range(count):
        ckpt.save(os.path.join(d, "ckpt"))


def test_a_saver_directory_without_its_state_file_is_refused_naming_the_prefix_to_pass(tmp_path, capsys):
    d = tmp_path / "run"
    _saver_checkpoints(d, [100])
    rc, out, _ = report(capsys, str(d), "--json")             # with its state file: read
    assert rc == 0 and json.loads(out)["weights_total"]["zeros"] == 8
    (d / "checkpoint").unlink()
    assert refused(capsys, d) == (f"{str(d)!r} {MISSING} and holds 1 checkpoint (model.ckpt-100); "
                                  f"pass its prefix instead: {str(d / 'model.ckpt-100')!r}")
    rc, out, _ = report(capsys, str(d / "model.ckpt-100"), "--json")      # following the hint works
    assert rc == 0 and json.loads(out)["weights_total"]["zeros"] == 8
    # two checkpoints: both named, the newest suggested (numbers in numeric order: 900 before 1000)
    d2 = tmp_path / "run2"
    _saver_checkpoints(d2, [900, 1000])
    (d2 / "checkpoint").unlink()
    assert refused(capsys, d2) == (f"{str(d2)!r} {MISSING} and holds 2 checkpoints (model.ckpt-900, "
                                   f"model.ckpt-1000); pass one prefix, e.g. {str(d2 / 'model.ckpt-1000')!r}")


def test_a_tf2_checkpoint_directory_without_its_state_file_is_refused(tmp_path, capsys):
    d = tmp_path / "tf2"
    _tf2_checkpoints(d, 1)
    assert report(capsys, str(d))[0] == 0
    (d / "checkpoint").unlink()
    assert refused(capsys, d) == (f"{str(d)!r} {MISSING} and holds 1 checkpoint (ckpt-1); pass its prefix "
                                  f"instead: {str(d / 'ckpt-1')!r}")
    rc, out, _ = report(capsys, str(d / "ckpt-1"), "--json")
    assert rc == 0 and [t["name"] for t in json.loads(out)["tensors"]] == ["w"]
    # the same refusal when the format is given
    rc, _, err = report(capsys, str(d), "--format", "tf-checkpoint")
    assert rc == 1 and f"{MISSING} and holds 1 checkpoint (ckpt-1)" in err, err


def test_mixed_prefixes_index_without_data_and_data_without_index_are_all_named(tmp_path, capsys):
    d = tmp_path / "mixed"
    _saver_checkpoints(d, [100])
    _tf2_checkpoints(d, 1)
    (d / "checkpoint").unlink()
    assert refused(capsys, d) == (f"{str(d)!r} {MISSING} and holds 2 checkpoints (ckpt-1, model.ckpt-100); "
                                  f"pass one prefix, e.g. {str(d / 'model.ckpt-100')!r}")
    # an .index whose data shard is gone, a data shard whose .index is gone
    (d / "ckpt-1.data-00000-of-00001").unlink()
    (d / "model.ckpt-100.index").unlink()
    assert refused(capsys, d) == (f"{str(d)!r} {MISSING} and holds 1 checkpoint (ckpt-1 [no .data shard]) and "
                                  f"data shards without an .index file (model.ckpt-100); pass its prefix "
                                  f"instead: {str(d / 'ckpt-1')!r}")
    (d / "ckpt-1.index").unlink()
    assert refused(capsys, d) == (f"{str(d)!r} {MISSING} and every *.index file: it holds only the checkpoint "
                                  "data shards of model.ckpt-100, whose .index file is missing (a checkpoint is "
                                  "read through PREFIX.index)")


@pytest.mark.parametrize("content", [[], ["notes.txt", "events.out.tfevents.1"]])
def test_an_empty_or_unrelated_directory_is_refused(tmp_path, capsys, content):
    for name in content:
        (tmp_path / name).write_text("x")
    err = refused(capsys, tmp_path)
    assert err == (f"{str(tmp_path)!r} is a directory but neither a SavedModel (no saved_model.pb) nor a "
                   "TensorFlow checkpoint directory (no 'checkpoint' state file and no *.index file)"), err
    with pytest.raises(ValueError) as info:                    # what --format tf-checkpoint says
        directory_checkpoint_prefix(str(tmp_path))
    holds = "it holds events.out.tfevents.1, notes.txt" if content else "it is empty"
    assert str(info.value) == (f"{str(tmp_path)!r} holds no TensorFlow checkpoint: no 'checkpoint' state file "
                               f"and no *.index file; {holds}")
    rc, _, err = report(capsys, str(tmp_path), "--format", "tf-checkpoint")
    assert rc == 1 and err.strip() == f"sparsify report: error: {info.value}", err


def test_the_state_file_decides_and_its_faults_are_named(tmp_path):
    for f in ("a.index", "a.data-00000-of-00001", "b.index", "b.data-00000-of-00001"):
        (tmp_path / f).write_bytes(b"")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "a"\nall_model_checkpoint_paths: "b"\n')
    assert directory_checkpoint_prefix(str(tmp_path)) == str(tmp_path / "a")
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "b"}"\n')      # absolute
    assert directory_checkpoint_prefix(str(tmp_path)) == str(tmp_path / "b")
    (tmp_path / "checkpoint").write_text('all_model_checkpoint_paths: "b"\n')
    with pytest.raises(ValueError, match=r"'checkpoint' state file names no model_checkpoint_path; pass the "
                                         r"checkpoint prefix$"):
        directory_checkpoint_prefix(str(tmp_path))
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "c"\n')
    with pytest.raises(ValueError, match=r"'checkpoint' state file names 'c', but '.*c\.index' is missing$"):
        directory_checkpoint_prefix(str(tmp_path))


def test_many_prefixes_are_shortened():
    names = [f"ckpt-{i}" for i in range(1, 10)]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for n in names:
            open(os.path.join(d, n + ".index"), "w").close()
        with pytest.raises(ValueError) as info:
            directory_checkpoint_prefix(d)
    assert "holds 9 checkpoints (ckpt-1 [no .data shard], ckpt-2 [no .data shard], ckpt-3 [no .data shard], " \
           "ckpt-4 [no .data shard], ckpt-5 [no .data shard], ckpt-6 [no .data shard] and 3 more); pass one " \
           "prefix, e.g. " in str(info.value) and str(info.value).endswith("ckpt-9'")


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 10**6), min_size=1, max_size=8), st.sets(st.integers(0, 10**6), max_size=4))
def test_prefixes_come_in_numeric_order(indexed, sharded):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for n in indexed:
            open(os.path.join(d, f"model.ckpt-{n}.index"), "w").close()
        for n in sharded:
            open(os.path.join(d, f"model.ckpt-{n}.data-00000-of-00002"), "w").close()
        open(os.path.join(d, "model.ckpt-x.meta"), "w").close()           # neither an index nor a shard
        assert checkpoint_prefixes(d) == [f"model.ckpt-{n}" for n in sorted(indexed)]
        assert data_shard_prefixes(d) == [f"model.ckpt-{n}" for n in sorted(sharded)]
        with pytest.raises(ValueError) as info:
            directory_checkpoint_prefix(d)
    assert str(info.value).endswith(repr(os.path.join(d, f"model.ckpt-{max(indexed)}")))


def test_a_saved_models_variables_directory_points_to_the_saved_model(tmp_path, capsys):
    import tensorflow as tf

    module = tf.Module()
    module.w = tf.Variable(np.eye(4, dtype=np.float32))
    tf.saved_model.save(module, str(tmp_path / "sm"))
    variables = tmp_path / "sm" / "variables"
    assert refused(capsys, variables) == (
        f"{str(variables)!r} {MISSING} and holds 1 checkpoint (variables); pass its prefix instead: "
        f"{str(variables / 'variables')!r} (or its SavedModel directory {str(tmp_path / 'sm')!r})")
    for path in (variables / "variables", tmp_path / "sm"):
        rc, out, _ = report(capsys, str(path), "--json")
        assert rc == 0 and json.loads(out)["weights_total"]["zeros"] == 12
