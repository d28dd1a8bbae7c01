"""`sparsify.cli.atomic`: atomic files and paths leave the old file and no temporary file on any failure
(run directories are tested through the demo in test_demo_faults.py)."""
from __future__ import annotations

import errno

import pytest

from sparsify.cli.atomic import OutputError, atomic_file, atomic_path, check_destination, write_text


@pytest.mark.parametrize("opener", ["file", "path"])
@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError, OutputError])
def test_a_failure_leaves_the_old_file_and_nothing_else(tmp_path, opener, failure):
    target = tmp_path / "out.txt"
    target.write_text("old")
    raised = failure(errno.ENOSPC, "No space left on device") if failure is not KeyboardInterrupt else failure()
    with pytest.raises(failure if failure is not OSError else OutputError) as info:
        if opener == "file":
            with atomic_file(target, "w") as fh:
                fh.write("half of the new")
                raise raised
        else:
            with atomic_path(target) as tmp:
                tmp.write_text("half of the new")
                raise raised
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    if failure is OSError:              # an OS error names the file and says what is left
        assert str(info.value).endswith(f"could not write {str(target)!r}: No space left on device "
                                        "(the existing file is unchanged)")
        assert info.value.errno == errno.ENOSPC
    if failure is OutputError:          # an OutputError from the block passes through as it is
        assert info.value is raised


def test_atomic_path_refuses_a_tool_that_wrote_nothing(tmp_path):
    with pytest.raises(OutputError, match="nothing was written to"):
        with atomic_path(tmp_path / "model.keras"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_check_destination(tmp_path):
    check_destination(tmp_path / "new.json")            # a new file in an existing directory: fine
    write_text(tmp_path / "new.json", "{}")
    check_destination(tmp_path / "new.json")            # an existing file: fine (replaced atomically)
    with pytest.raises(OutputError, match="directory .* does not exist"):
        check_destination(tmp_path / "missing" / "x.json")
    with pytest.raises(OutputError, match="it is a directory"):
        check_destination(tmp_path)


def test_a_sigint_held_back_is_raised_where_the_block_ends(sigint_raises):
    import gc
    import os
    import signal

    from sparsify.cli.atomic import signals_deferred

    reached = []
    ran_in_callback = []

    def callback(phase, info):         # Python drops exceptions raised in here
        ran_in_callback.append(phase)

    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                reached.append("after the signal")
            reached.append("not reached: raised at the end of the block")
        gc.collect()                   # a callback right after: nothing is pending to be lost in it
    finally:
        gc.callbacks.remove(callback)
    assert reached == ["after the signal"] and ran_in_callback


def test_a_held_signal_goes_to_the_python_handler_that_was_installed():
    import os
    import signal

    from sparsify.cli.atomic import signals_deferred

    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]                  # once, after the block
    finally:
        signal.signal(signal.SIGTERM, previous)


# ----- artifacts made from a run's outputs (issue 58 item 6) ----------------------------------------------
def _commit(out, files: dict[str, bytes]) -> None:
    from sparsify.cli.atomic import RunDirectory, write_bytes

    with RunDirectory(out, planned=list(files)) as run:
        for name, data in files.items():
            write_bytes(run.stage / name, data)
        run.commit({"command": "test"})


def test_an_export_beside_a_run_belongs_to_it_and_goes_with_it(tmp_path):
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.atomic import MANIFEST, verify_run
    from sparsify.cli.export import export_model

    out = tmp_path / "run"
    model = lambda seed: write_keras_archive(tmp_path / f"m{seed}.keras", mlp_weights(seed)).read_bytes()  # noqa: E731
    _commit(out, {"model.keras": model(0), "config.yaml": b"a: 1\n"})
    res = export_model(out / "model.keras", to="npz")
    assert res.notes[-1] == (f"recorded in {out / MANIFEST}: a new run into that directory removes it with the "
                             "old run's files")
    derived = verify_run(out)["derived"]
    assert list(derived) == ["model.sparse.npz"] and derived["model.sparse.npz"]["source"] == "model.keras"
    _commit(out, {"model.keras": model(1), "config.yaml": b"a: 2\n"})      # the next run: no stale export left
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "model.keras", MANIFEST]
    assert "derived" not in verify_run(out)


def test_verify_run_refuses_stale_exports(tmp_path):
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.atomic import register_derived, verify_run
    from sparsify.cli.export import export_model

    out = tmp_path / "run"
    _commit(out, {"model.keras": write_keras_archive(tmp_path / "m.keras", mlp_weights()).read_bytes()})
    (out / "model.tflite").write_bytes(b"an export of an earlier run, never recorded")
    with pytest.raises(ValueError, match=r"model\.tflite \(an export of model\.keras\) is not from this run: it is "
                                         r"stale; export model\.keras again or remove it$"):
        verify_run(out)
    (out / "model.tflite").unlink()
    res = export_model(out / "model.keras", to="npz")
    verify_run(out)
    with open(res.out, "ab") as fh:                        # changed after it was recorded: not the run's any more
        fh.write(b"x")
    with pytest.raises(ValueError, match=r"model\.sparse\.npz was made from model\.keras of another run, or changed "
                                         r"since: it is stale; export it again$"):
        verify_run(out)
    _commit(out, {"model.keras": b"new"})                  # a changed file is never removed, and still refused
    assert (out / "model.sparse.npz").exists()
    with pytest.raises(ValueError, match=r"model\.sparse\.npz \(an export of model\.keras\) is not from this run"):
        verify_run(out)
    elsewhere = tmp_path / "m.sparse.npz"                  # not beside the source in its run directory: not recorded
    elsewhere.write_bytes(b"x")
    assert register_derived(out / "model.keras", elsewhere) is False
    assert register_derived(tmp_path / "m.keras", elsewhere) is False
