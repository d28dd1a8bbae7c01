"""A full disk while the demo saves a model names the OS error and the file (issue 28), whatever the framework's
saver says: torch's zip writer ("unexpected pos"), TensorFlow's Saver ("Graph execution error ... SaveV2")."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import errno
import io
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparsify.cli.atomic import OutputError
from sparsify.cli.demo.common import writing
from sparsify.cli.demo.save_errors import WatchedFile, os_error_in

ROOT = Path(__file__).resolve().parents[3]

# TensorFlow 2.21's message for a Saver hitting a full tmpfs (the node's traceback shortened)
TF_DISK_FULL = ("Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call last):\n"
                "    File \"<stdin>\", line 6, in <module>\nNode: 'save/SaveV2'\n"
                "/out/ck/model.ckpt.data-00000-of-00001.tempstate17449283364988273958; No space left on device\n"
                "\t [[{{node save/SaveV2}}]]\nHint: If you want to see a list of allocated tensors when OOM happens")


class FullAfter(io.BytesIO):
    """A file that takes ``room`` bytes and then fails like a full disk."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_os_error_in_tensorflow_message():
    e = os_error_in(TF_DISK_FULL)
    assert (e.errno, e.strerror, e.filename) == (errno.ENOSPC, "No space left on device",
                                                 "/out/ck/model.ckpt.data-00000-of-00001")
    assert os_error_in("[enforce fail at inline_container.cc:672] . unexpected pos 34944 vs 34896") is None
    assert os_error_in("write failed: File too large").errno == errno.EFBIG


def test_watched_file_keeps_the_first_error_and_delegates():
    f = WatchedFile(FullAfter(4), "m.pt")
    assert f.write(b"abc") == 3 and f.tell() == 3
    with pytest.raises(OSError):
        f.write(b"defg")
    assert (f.error.errno, f.error.filename) == (errno.ENOSPC, "m.pt")


def test_torch_save_into_a_full_file_names_the_os_error(tmp_path):
    torch = pytest.importorskip("torch")
    state = {"w": torch.ones(64, 64)}
    with pytest.raises(OutputError) as info:
        with writing(tmp_path / "model.pt") as watch:
            torch.save(state, watch(FullAfter(1000)))
    assert str(info.value) == f"[Errno {errno.ENOSPC}] could not write {str(tmp_path / 'model.pt')!r}: " \
                              "No space left on device"
    # without the watched file torch says only "unexpected pos": the reason the demo hands it watch(fh)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        torch.save(state, FullAfter(1000))


def test_tensorflow_message_becomes_the_os_error_and_its_file(tmp_path):
    with pytest.raises(OutputError) as info:
        with writing(tmp_path / "checkpoint"):
            raise RuntimeError(TF_DISK_FULL)
    assert info.value.errno == errno.ENOSPC
    assert str(info.value).endswith("could not write '/out/ck/model.ckpt.data-00000-of-00001': No space left on device")
    with pytest.raises(OutputError, match=r"could not write '.*checkpoint': saver broke$"):
        with writing(tmp_path / "checkpoint"):
            raise RuntimeError("saver broke")


def _file_size_limit(max_bytes: int):
    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return setup


@pytest.mark.slow
@pytest.mark.parametrize("framework, written", [("torch", "model.pt"),
                                                ("tf-graph", "checkpoint/model.ckpt.data-00000-of-00001")])
def test_demo_that_cannot_write_its_model_names_the_os_error_and_the_file(tmp_path, framework, written):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "sparsify", "demo", "--framework", framework, "--steps", "5",
                           "--out", str(out), "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), preexec_fn=_file_size_limit(30_000),
                          timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"sparsify demo: error: could not write {str(out / written)!r}: File too large; "), err
