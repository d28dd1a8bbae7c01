"""`sparsify.cli.frameworks`: quiet imports of TensorFlow and torch, with a clear error when one is missing."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from sparsify.cli.frameworks import import_tensorflow, import_torch, native_stderr_silenced


def test_native_stderr_silenced_hides_only_the_block(capfd):
    os.write(2, b"before ")
    with native_stderr_silenced():
        os.write(2, b"native noise")          # what TensorFlow's C++ start-up writes, below Python
    os.write(2, b"after")
    assert capfd.readouterr().err == "before after"


def test_native_stderr_is_restored_when_the_block_raises(capfd):
    with pytest.raises(RuntimeError):
        with native_stderr_silenced():
            raise RuntimeError("boom")
    os.write(2, b"still visible")
    assert capfd.readouterr().err == "still visible"


def test_import_torch():
    torch = import_torch()
    assert torch is sys.modules["torch"] and torch.zeros(2).sum().item() == 0.0


def test_missing_framework_names_the_extra(monkeypatch):
    # a None entry in sys.modules makes `import name` raise ImportError, as if it were not installed
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r'torch is not installed .*; pip install "sparsify-train\[torch\]"$'):
        import_torch()
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(ImportError, match=r'tensorflow is not installed .*; pip install "sparsify-train\[tf\]"$'):
        import_tensorflow()


def test_every_install_hint_has_one_quoting_style():
    """Our messages quote a requirement the way install_command does: pip install "sparsify-train[extra]"."""
    root = Path(__file__).resolve().parents[3]
    sources = [p for pkg in ("sparsify", "sparsify_tf", "sparsify_keras", "sparsify_torch")
               for p in sorted((root / pkg).rglob("*.py"))]
    assert len(sources) > 50
    single = [f"{p.relative_to(root)}:{i}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"pip install '|'sparsify-train\[", line)]
    assert single == []


def test_import_tensorflow_quiets_its_python_logger():
    tf = import_tensorflow()
    assert tf is sys.modules["tensorflow"] and tf.get_logger().level == 40      # logging.ERROR
    logger = tf.get_logger()
    old = logger.level
    try:                    # the level comes from the call, not from an earlier import
        logger.setLevel("INFO")
        assert import_tensorflow(quiet_python_logs=False).get_logger().level == 20
        assert import_tensorflow().get_logger().level == 40
    finally:
        logger.setLevel(old)
