"""`sparsify.cli.atomic`: atomic files and paths leave the old file and no temporary file on any failure; signals
held back for a block (run directories: test_run_directory.py, and through the demo in test_demo_faults.py)."""
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
