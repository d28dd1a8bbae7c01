"""`sparsify.yaml_io`: safe, bounded YAML for config files (issue 15: bombs, duplicates, binary, deep nesting)."""
from __future__ import annotations

import os
import time

import pytest
import yaml

from sparsify import PruningConfig
from sparsify.config import load_yaml_mapping as config_load_yaml_mapping
from sparsify.config import yaml_loader as config_yaml_loader
from sparsify.yaml_io import MAX_DEPTH, MAX_NODES, load_yaml_mapping, load_yaml_text, shorten, yaml_loader

BOMB = "\n".join(["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
                    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]" for i in range(8)]
                 + ["pattern: *i"])


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def test_config_keeps_its_names():
    assert config_yaml_loader is yaml_loader and config_load_yaml_mapping is load_yaml_mapping


def test_plain_configs_load_as_before(tmp_path):
    assert load_yaml_text("pattern: 2:4\nend_step: 1_000\nexponent: 1e0\nop_names: [fc, conv]\n") == \
        {"pattern": "2:4", "end_step": 1000, "exponent": 1.0, "op_names": ["fc", "conv"]}
    # anchors and merge keys within the bounds are fine; explicit keys override merged ones
    assert load_yaml_text("base: &b {end_step: 10, pattern: 4x1}\ncfg:\n  <<: *b\n  end_step: 20\n")["cfg"] == \
        {"end_step": 20, "pattern": "4x1"}
    f = _write(tmp_path, "c.yaml", "\ufeffpruning:\n  pattern: 2:4\n  target_sparsity: 0.5\n")   # BOM is fine
    assert PruningConfig.from_yaml(f) == PruningConfig(pattern="2:4", target_sparsity=0.5)


def test_alias_bomb_is_refused_quickly_and_briefly(tmp_path):
    f = _write(tmp_path, "bomb.yaml", BOMB)
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as e:
        PruningConfig.from_yaml(f)
    assert time.perf_counter() - t0 < 5
    msg = str(e.value)
    assert f"config file {str(f)!r}: aliases expand to more than {MAX_NODES} nodes" in msg and len(msg) < 400
    with pytest.raises(yaml.YAMLError, match="aliases expand"):
        yaml.load(BOMB, Loader=yaml_loader())


def test_recursive_alias_and_deep_nesting(tmp_path):
    with pytest.raises(ValueError, match="recursive alias"):
        load_yaml_text("a: &a [1, *a]")
    deep = _write(tmp_path, "deep.yaml", "op_names: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match=rf"deep.yaml'?: nesting deeper than {MAX_DEPTH} levels \(line 1\)"):
        load_yaml_mapping(deep)
    # nesting built from aliases is measured after expansion
    levels = ["l0: &l0 " + "[" * 40 + "1" + "]" * 40] + [f"l{i}: &l{i} " + "[" * 30 + f"*l{i - 1}" + "]" * 30
                                                          for i in (1, 2)]
    with pytest.raises(ValueError, match="once aliases are expanded"):
        load_yaml_text("\n".join(levels))
    assert load_yaml_text("[" * 10 + "]" * 10) == [[[[[[[[[[]]]]]]]]]]


def test_duplicate_keys_are_refused(tmp_path):
    f = _write(tmp_path, "dup.yaml", "pattern: 4x1\ntarget_sparsity: 0.5\npattern: 2:4\n")
    with pytest.raises(ValueError, match=r"dup.yaml'?: duplicate key 'pattern' on line 3 \(first on line 1\)"):
        load_yaml_mapping(f)
    with pytest.raises(ValueError, match="duplicate key 'end_step' on line 3"):
        load_yaml_text("pruning:\n  end_step: 1\n  end_step: 2\n")


def test_binary_and_non_utf8_files(tmp_path):
    png = _write(tmp_path, "plot.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ValueError, match=r"plot.png' is a binary file \(it holds NUL bytes\), not YAML text"):
        PruningConfig.from_yaml(png)
    latin1 = _write(tmp_path, "latin1.yaml", "pattern: 4x1  # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.yaml' is not UTF-8 text \(byte 0xe9 at offset 19\)"):
        load_yaml_mapping(latin1)
    with pytest.raises(ValueError, match="is a directory"):
        load_yaml_mapping(tmp_path)
    big = _write(tmp_path, "big.yaml", b"# " + b"x" * (1 << 20) + b"\n")
    with pytest.raises(ValueError, match="more than a config can be"):
        load_yaml_mapping(big)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipe_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file"):
        load_yaml_mapping(fifo)


def test_shorten():
    assert shorten("abc", 5) == "abc" and shorten("abcdef", 2) == "ab... (6 characters)"
