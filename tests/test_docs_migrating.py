"""docs/migrating.md: every fenced python block runs, except those marked ``<!-- skip: ... -->``."""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DOC = Path(__file__).resolve().parents[1] / "docs" / "migrating.md"
BLOCK = re.compile(r"(?:(<!-- skip: [^>]*-->)\s*\n)?```python\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str | None, str]]:
    """``(section, skip reason or None, code)`` for every python block, in order."""
    text = DOC.read_text()
    out = []
    for m in BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[:m.start()], flags=re.M)
        out.append((heading[-1] if heading else "", m.group(1), m.group(2)))
    return out


RUN = [(section, code) for section, skip, code in blocks() if skip is None]


def test_every_section_has_a_before_and_an_after():
    sections = {}
    for section, skip, _ in blocks():
        sections.setdefault(section, []).append(skip is None)
    assert set(sections) >= {"tfmot (`tensorflow_model_optimization`) Keras pruning",
                             "SparseML TF-v1 (`sparseml.tensorflow_v1.optim`)",
                             "torch.ao / torchao sparsity (`WeightNormSparsifier`, `to_sparse_semi_structured`)",
                             "Intel Neural Compressor pruning configs"}
    for section, runs in sections.items():
        assert False in runs and True in runs, section


@pytest.mark.parametrize("section, code", RUN, ids=[f"{i}-{s.split()[0]}" for i, (s, _) in enumerate(RUN)])
def test_after_block_runs_and_prints_what_its_comments_say(section, code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/migrating.md [{section}]", "exec"), {"__name__": "__migrating__"})
    printed = out.getvalue().splitlines()
    promised = [m.group(1).split(":")[0].strip() for line in code.splitlines()
                if line.lstrip().startswith("print(") and (m := re.search(r"#\s*(.+)$", line))]
    assert len(printed) >= len(promised)
    for shown, want in zip(printed, promised):
        assert shown == want
