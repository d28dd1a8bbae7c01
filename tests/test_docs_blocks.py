"""Every fenced code block of README.md and docs/*.md runs, as a reader would run it.

How a page marks its blocks (HTML comments, invisible on GitHub and on the site):

* ``<!-- setup: CODE -->`` before a block: Python the block assumes (a small model, data, a file),
  run just before it. Text may stand between the comment and the block.
* ``<!-- skip: REASON -->`` before a block: the block is not run; the reason says why (e.g. it needs
  ``torchrun`` with several processes) and where it is tested instead.
* ``<!-- keras-backend: NAME -->`` before a block (with or without a setup comment): the block runs with
  ``KERAS_BACKEND=NAME`` (``jax``, ``torch``), in one process per backend and page, in page order.

The ``python`` blocks of one page run in order in one namespace (a later block may use an earlier
block's names), in one fresh process per page with a scratch working directory holding the shipped
``prune.yaml``. Each line of a ``bash`` block must be a ``sparsify`` command (``&&`` chains allowed,
``#`` comments dropped); it runs through ``sparsify.cli.main`` in that process and must exit 0. The demo
runs on 40 steps unless the line sets ``--steps``. ``text`` blocks show output or diagrams and are not
run; every other fence must be labelled.

What a block says it prints is checked (``claims``): a line of a ``python`` block that starts with
``print(`` and ends in a comment that starts with a value (a digit, ``-``, ``{``, ``[``, ``(``, a quote,
``True``, ``False`` or ``None``) claims that the call writes that value. The comment may go on in prose
after the value, separated by ``:``, ``,``, ``;`` or a space and a word (``# 0.9: 450 of 500 blocks``),
so the text printed must be the whole comment or its start up to such a separator. A comment that ends
in ``:`` (``# the layers differ:``) hands the claim to the comment-only line below it (``# {'fc': 0.9}``).
Comments that start with a word are prose and are not checked. The last call of a claimed ``print``
counts (in a loop, the last round); a claimed ``print`` that never runs fails the block.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash", "text")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_DIRECTIVE = re.compile(r"<!--\s*(setup|skip|keras-backend):(.*?)-->", re.S)


_VALUE = re.compile(r"""(-?\d|[\[{('"]|(True|False|None)\b)""")
_PROSE_AFTER = re.compile(r"([:,;]|\s+[A-Za-z(])")


def claims(code: str) -> list[tuple[int, str]]:
    """(line in the block, the value it claims) of each ``print`` whose comment states what it writes."""
    lines = code.splitlines()
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string[1:].strip()
    out = []
    for n, line in enumerate(lines, 1):
        if not re.match(r"\s*print\(", line) or n not in comments:
            continue
        text = comments[n]
        if text.endswith(":") and n < len(lines) and lines[n].strip().startswith("#"):
            text = comments.get(n + 1, "")
        if _VALUE.match(text):
            out.append((n, text))
    return out


def claim_holds(printed: str, claim: str) -> bool:
    """Whether ``printed`` (one call's output, newline dropped) is the claim or its start before prose."""
    return claim == printed or (claim.startswith(printed) and bool(_PROSE_AFTER.match(claim[len(printed):])))


@dataclasses.dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    setup: str = ""
    skip: str | None = None
    backend: str = ""
    claims: list = dataclasses.field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def extract(path: Path, name: str | None = None) -> list[Block]:
    """The fenced blocks of a Markdown page with the setup or skip comment before each (dedented)."""
    lines = path.read_text().splitlines()
    name = name or str(path.relative_to(ROOT))
    blocks: list[Block] = []
    text_since = 0               # where the prose since the last block starts
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        directives = _DIRECTIVE.findall("\n".join(lines[text_since:i]))
        backends = [d[1].strip() for d in directives if d[0] == "keras-backend"]
        directives = [d for d in directives if d[0] != "keras-backend"]
        if len(directives) > 1 or len(backends) > 1:
            raise AssertionError(f"{name}:{i + 1}: more than one setup/skip (or keras-backend) comment before one block")
        pending = directives[0] if directives else None
        indent, lang, start = len(m.group(1)), m.group(2), i
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{name}:{start + 1}: the fence is never closed")
        block = Block(name, start + 1, lang, "\n".join(body) + "\n", backend=backends[0] if backends else "")
        if lang == "python":
            block.claims = claims(block.code)
        if pending and pending[0] == "setup":
            block.setup = _dedent(pending[1])
        elif pending:
            block.skip = " ".join(pending[1].split())
        blocks.append(block)
        i += 1
        text_since = i
    return blocks


def _dedent(code: str) -> str:
    return textwrap.dedent(code.strip("\n")) + "\n"


ALL_BLOCKS = {path.name: extract(path) for path in PAGES}
RUNNABLE = [name for name, blocks in ALL_BLOCKS.items()
            if any(b.lang in ("python", "bash") and b.skip is None for b in blocks)]

# Runs in the page's own process: the blocks come as JSON on stdin.
_RUNNER = r"""
import json, os, shlex, sys, traceback
blocks = json.load(sys.stdin)
namespace = {"__name__": "__main__"}

def run_command(line, where):
    from sparsify.cli import main
    for part in line.split("#")[0].split("&&"):
        words = shlex.split(part)
        if not words:
            continue
        if words[0] != "sparsify":
            raise SystemExit(f"{where}: not a sparsify command: {part.strip()!r} (mark the block skip)")
        args = words[1:]
        if args[0] == "demo":
            if "--steps" not in args:
                args += ["--steps", "40"]
            if "--no-progress" not in args:
                args.append("--no-progress")
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
        if rc not in (0, None):
            raise SystemExit(f"{where}: sparsify {' '.join(args)} exited with {rc}")

import io, re, time
printed = {}

def claimed_print(line, *args, **kwargs):
    buffer = io.StringIO()
    print(*args, **{**kwargs, "file": buffer})
    sys.stdout.write(buffer.getvalue())
    printed[line] = buffer.getvalue().rstrip("\n")

namespace["__claimed_print__"] = claimed_print
for b in blocks:
    where = b["where"]
    started = time.perf_counter()
    try:
        if b["setup"]:
            exec(compile(b["setup"], where + " (setup)", "exec"), namespace)
        if b["lang"] == "python":
            code = b["code"].splitlines()
            for line, _ in b["claims"]:
                code[line - 1] = code[line - 1].replace("print(", f"__claimed_print__({line}, ", 1)
            printed.clear()
            exec(compile("\n".join(code) + "\n", where, "exec"), namespace)
            for line, claim in b["claims"]:
                got = printed.get(line)
                if got is None or not claim_holds(got, claim):
                    raise AssertionError(f"line {line} of the block prints {got!r}, its comment says {claim!r}")
        else:
            for line in b["code"].splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    run_command(line, where)
    except BaseException as e:
        traceback.print_exc()
        print(f"BLOCK FAILED: {where}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("ok", where, f"{time.perf_counter() - started:.1f} s", flush=True)
"""


def test_every_block_is_labelled_and_every_skip_says_why():
    assert sum(len(b) for b in ALL_BLOCKS.values()) >= 30      # the parser found the pages' blocks
    for blocks in ALL_BLOCKS.values():
        for b in blocks:
            assert b.lang in LANGUAGES, f"{b.where}: label the fence with one of {LANGUAGES}, got {b.lang!r}"
            if b.skip is not None:
                assert len(b.skip.split()) >= 4, f"{b.where}: a skipped block needs a reason, got {b.skip!r}"
            if b.lang == "text":
                assert not b.setup and b.skip is None, f"{b.where}: a text block is not run"


def test_extract_reads_setup_skip_and_indented_fences(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- setup:\n    n = 2\n-->\nSome prose.\n\n```python\nassert n == 2\n```\n\n"
                    "* item\n\n  ```bash\n  sparsify --help\n  ```\n<!-- skip: needs two processes "
                    "(torchrun) -->\n```python\nraise SystemExit\n```\n```text\nout\n```\n")
    blocks = extract(page, "page.md")
    assert [(b.lang, b.setup, b.skip) for b in blocks] == [
        ("python", "n = 2\n", None), ("bash", "", None), ("python", "", "needs two processes (torchrun)"),
        ("text", "", None)]
    assert blocks[1].code == "sparsify --help\n"


def run_blocks(blocks: list[Block], cwd: Path, backend: str = "") -> subprocess.CompletedProcess:
    """Run blocks in order in one fresh process (``KERAS_BACKEND=backend`` if given), claims checked."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **({"KERAS_BACKEND": backend} if backend else {}))
    runner = f"import re\n_PROSE_AFTER = re.compile({_PROSE_AFTER.pattern!r})\n" + inspect.getsource(claim_holds) + _RUNNER
    return subprocess.run([sys.executable, "-c", runner], cwd=cwd, env=env, capture_output=True, text=True,
                          input=json.dumps([dataclasses.asdict(b) | {"where": b.where} for b in blocks]), timeout=600)


def test_claims_read_the_comment_of_a_print():
    code = ("print(x)   # 0.9: 450 of 500 blocks\nprint(y)   # the layers differ:\n# {'a': 0.5}\n"
            "print(z)   # prose, not checked\nw = 1      # 0.3, not a print\nprint('#', v)  # None\n")
    assert claims(code) == [(1, "0.9: 450 of 500 blocks"), (2, "{'a': 0.5}"), (6, "None")]


@pytest.mark.parametrize("printed, claim, holds", [
    ("0.9", "0.9", True), ("0.9", "0.9: 450 of 500", True), ("0.9", "0.9, every layer", True),
    ("0.9", "0.9 exactly", True), ("0.7994", "0.8 exactly", False), ("0.9", "0.9004: 506 of 562", False),
    ("12", "12 0.5", False), ("12 0.5", "12 0.5", True), ("{'a': 0.5}", "{'a': 0.5, 'b': 0.5}", False)])
def test_claim_holds_when_the_printed_text_is_the_claim_or_its_start(printed, claim, holds):
    assert claim_holds(printed, claim) is holds


def test_a_wrong_claim_fails_its_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nn = 3\nprint(n / 4)    # 0.75\n```\n\n```python\nprint(n * 0.1)  # 0.3\n```\n")
    res = run_blocks(extract(page, "page.md"), tmp_path)
    assert res.returncode == 1 and res.stdout.splitlines()[0] == "0.75"
    assert [ln.split()[:2] for ln in res.stdout.splitlines()[1:]] == [["ok", "page.md:1"], ["0.30000000000000004"]]
    assert "BLOCK FAILED: page.md:6: AssertionError: line 1 of the block prints '0.30000000000000004', " \
           "its comment says '0.3'" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE)
def test_page_blocks_run(page, tmp_path):
    runnable = [b for b in ALL_BLOCKS[page] if b.lang in ("python", "bash") and b.skip is None]
    shutil.copy(ROOT / "prune.yaml", tmp_path / "prune.yaml")
    for backend in dict.fromkeys(b.backend for b in runnable):         # the page's default process first
        blocks = [b for b in runnable if b.backend == backend]
        res = run_blocks(blocks, tmp_path, backend)
        assert res.returncode == 0, f"{page} {backend}: a block failed\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
        assert [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("ok ")] == [b.where for b in blocks]
