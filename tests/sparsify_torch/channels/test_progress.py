"""Progress bars: on by default on a terminal only."""
import io
import sys

import pytest

from sparsify_torch.channels.progress import check_show_tqdm, progress_bar, progress_enabled


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Closed(io.StringIO):
    def isatty(self):
        raise ValueError("I/O operation on closed file")


@pytest.mark.parametrize("stream,show_tqdm,expected", [
    (Terminal(), None, True), (io.StringIO(), None, False), (Closed(), None, False),
    (Terminal(), False, False), (io.StringIO(), True, True)])
def test_progress_enabled(monkeypatch, stream, show_tqdm, expected):
    monkeypatch.setattr(sys, "stderr", stream)
    assert progress_enabled(show_tqdm) is expected


def test_bar_writes_to_stderr_or_nothing(monkeypatch):
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    bar = progress_bar(None, total=2, desc="work")
    bar.update(2)
    bar.close()
    assert "work" in stream.getvalue() and "2/2" in stream.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    silent = progress_bar(None, total=2, desc="work")
    silent.update(1)
    silent.set_postfix(x=1)
    silent.close()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("value", [1, "yes", 0.0])
def test_bad_show_tqdm(value):
    with pytest.raises(TypeError, match="show_tqdm must be True, False or None"):
        check_show_tqdm(value)
