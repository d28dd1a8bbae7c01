"""Run directories: the outputs of one run committed together, with a manifest written last.

* :class:`RunDirectory`: the outputs of one run (a model, its config, plots,
  a summary) committed together. They are written into a staging directory
  inside the output directory while the run works; the commit moves them into
  place with SIGINT/SIGTERM held back (:func:`~sparsify.cli.atomic.signals_deferred`),
  and writes the manifest (:data:`MANIFEST`, names, sizes and SHA-256 of every file)
  last (Ctrl-C under the command: :mod:`.interrupts`). An
  interrupted run leaves the previous run as it was; :func:`verify_run` says
  whether a directory holds one complete run. A file or directory the new run
  would replace is only replaced if the previous run's manifest lists it with
  the same content: what sparsify did not write is never deleted.
* :func:`register_derived`: an artifact made later from a run's output and
  written beside it (``sparsify export runs/keras/model.keras`` ->
  ``model.tflite``) is added to the run's manifest under ``"derived"``: the
  next run into that directory removes it with the rest of the old run, and
  :func:`verify_run` refuses one whose source has changed since.

Each file is written atomically (:mod:`.atomic`). :class:`RunDirectory`'s
docstring shows a whole run.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Iterable

from . import interrupts
from .atomic import OutputError, atomic_file, remove_path, signals_deferred
from .export_names import derived_names          # the export's default names beside a source

__all__ = ["MANIFEST", "RunDirectory", "verify_run", "register_derived", "file_digest"]

#: Name of the manifest a committed run directory holds (written last).
MANIFEST = "sparsify-run.json"
_STAGING_PREFIX = ".sparsify-staging-"
_STAGING_MARK = ".sparsify-staging"


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tree_entries(root: Path, rel: str) -> dict[str, dict[str, Any]]:
    """``{relative file path: {"size", "sha256"}}`` of a file or every file under a directory."""
    p = root / rel
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return {f.relative_to(root).as_posix(): {"size": f.stat().st_size, "sha256": file_digest(f)} for f in files}


def _read_manifest(out: Path) -> dict[str, Any] | None:
    p = out / MANIFEST
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    return data


def _source_digest(files: dict[str, Any], top: str) -> str:
    """One SHA-256 over the manifest entries of the top-level output ``top`` (a file or a directory)."""
    listed = {rel: meta for rel, meta in files.items() if rel.split("/", 1)[0] == top}
    return hashlib.sha256(json.dumps(listed, sort_keys=True).encode()).hexdigest()


def _derived(man: dict[str, Any]) -> dict[str, dict[str, Any]]:
    derived = man.get("derived")
    return {k: v for k, v in derived.items() if isinstance(v, dict)} if isinstance(derived, dict) else {}


def verify_run(out: str | os.PathLike) -> dict[str, Any]:
    """Check that ``out`` holds one complete run: its manifest, every file it lists with that content.

    An artifact made from one of the run's outputs (:func:`register_derived`) must come from the output as
    it is now; one that an export writes beside an output by default (``model.keras`` ->
    ``model.tflite``, ``model.sparse.npz``, ``model.sparse.pt``) but the manifest does not list is stale.

    Returns:
        The manifest.

    Raises:
        ValueError: no manifest (no run committed, or one interrupted), a
            listed file missing or changed, or a stale artifact, naming it.
    """
    root = Path(out)
    man = _read_manifest(root)
    if man is None:
        raise ValueError(f"{os.fspath(out)!r} holds no complete run (no readable {MANIFEST})")
    for rel, meta in man["files"].items():
        f = root / rel
        if not f.is_file():
            raise ValueError(f"{os.fspath(out)!r}: {rel} is listed in {MANIFEST} but missing")
        if f.stat().st_size != meta.get("size") or file_digest(f) != meta.get("sha256"):
            raise ValueError(f"{os.fspath(out)!r}: {rel} differs from what {MANIFEST} lists")
    derived = _derived(man)
    for rel, meta in derived.items():
        f = root / rel
        if not f.exists():
            continue                                    # removed since: nothing stale is left
        if not f.is_file() or f.stat().st_size != meta.get("size") or file_digest(f) != meta.get("sha256") \
                or meta.get("source_sha256") != _source_digest(man["files"], str(meta.get("source"))):
            raise ValueError(f"{os.fspath(out)!r}: {rel} was made from {meta.get('source')} of another run, or "
                             "changed since: it is stale; export it again")
    tops = sorted({rel.split("/", 1)[0] for rel in man["files"]})
    for top in tops:
        for name in derived_names(top):
            if name not in derived and name not in tops and (root / name).exists():
                raise ValueError(f"{os.fspath(out)!r}: {name} (an export of {top}) is not from this run: it is "
                                 f"stale; export {top} again or remove it")
    return man


def register_derived(source: str | os.PathLike, artifact: str | os.PathLike) -> bool:
    """Record ``artifact``, made from ``source``, in the manifest of the run directory holding both.

    Only an artifact written directly into the directory of a committed run whose manifest lists
    ``source`` (a top-level output: ``model.keras``, ``saved_model``) with its current content is recorded;
    anything else is left alone. A later run into the directory removes a recorded artifact that is
    unchanged, as it replaces the run's own outputs, and :func:`verify_run` checks it.

    Returns:
        Whether it was recorded.

    Example:
        >>> import tempfile, os
        >>> from sparsify.cli.atomic import write_bytes
        >>> d = os.path.join(tempfile.mkdtemp(), "run")
        >>> with RunDirectory(d, planned=["m.bin"]) as run:
        ...     write_bytes(run.stage / "m.bin", b"weights")
        ...     _ = run.commit({"command": "doc"})
        >>> write_bytes(os.path.join(d, "m.small"), b"w")
        >>> register_derived(os.path.join(d, "m.bin"), os.path.join(d, "m.small"))
        True
        >>> sorted(verify_run(d)["derived"])
        ['m.small']
    """
    src, art = Path(os.path.abspath(source)), Path(os.path.abspath(artifact))
    root = art.parent
    if src.parent != root or not art.is_file():
        return False
    man = _read_manifest(root)
    if man is None:
        return False
    top = src.name
    listed = {rel: meta for rel, meta in man["files"].items() if rel.split("/", 1)[0] == top}
    try:
        if not listed or _tree_entries(root, top) != listed:
            return False
        meta = {"size": art.stat().st_size, "sha256": file_digest(art)}
    except OSError:
        return False
    derived = _derived(man)
    derived[art.name] = {**meta, "source": top, "source_sha256": _source_digest(man["files"], top)}
    man["derived"] = derived
    with atomic_file(root / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump(man, fh, indent=2)
    return True


class RunDirectory:
    """The outputs of one run, staged in ``out`` and committed together.

    Usage::

        run = RunDirectory(out, planned=["model.pt", "config.yaml"])   # checks before any work
        with run:                       # creates the staging directory; removed on any error
            torch.save(sd, run.stage / "model.pt")
            ...
            run.commit({"command": "demo"})   # moves everything into out, manifest last

    Args:
        out: the output directory (created if missing).
        planned: top-level names the run will write; checked up front so a run
            never starts work it could not commit.

    Raises:
        ValueError: ``out`` is a file, or a planned name exists in ``out`` and
            was not written by a previous run (not in its manifest, or changed
            since): it is left alone and the run refused.

    Example:
        >>> import tempfile, os
        >>> from sparsify.cli.atomic import write_text
        >>> d = os.path.join(tempfile.mkdtemp(), "run")
        >>> with RunDirectory(d, planned=["a.txt"]) as run:
        ...     write_text(run.stage / "a.txt", "1")
        ...     _ = run.commit({"command": "doc"})
        >>> sorted(os.listdir(d)), verify_run(d)["command"]
        (['a.txt', 'sparsify-run.json'], 'doc')
    """

    def __init__(self, out: str | os.PathLike, planned: Iterable[str] = ()) -> None:
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"out {os.fspath(out)!r} exists and is not a directory")
        self.previous = _read_manifest(self.out) if self.out.is_dir() else None
        self.stage: Path = self.out / f"{_STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._check_names(planned)
        self.committed = False
        self._created = False

    def _owned_tops(self) -> set[str]:
        """Top-level names the previous run wrote (or an export made from it, :func:`register_derived`) and
        that still hold exactly what was written."""
        if self.previous is None:
            return set()
        by_top: dict[str, dict[str, Any]] = {}
        for rel, meta in self.previous["files"].items():
            by_top.setdefault(rel.split("/", 1)[0], {})[rel] = meta
        for rel, meta in _derived(self.previous).items():
            if "/" not in rel and rel not in by_top:
                by_top[rel] = {rel: {"size": meta.get("size"), "sha256": meta.get("sha256")}}
        owned = set()
        for top, listed in by_top.items():
            p = self.out / top
            if not p.exists():
                continue
            try:
                now = _tree_entries(self.out, top)
            except OSError:
                continue
            if now == listed:
                owned.add(top)
        return owned

    def _check_names(self, names: Iterable[str]) -> None:
        names = [n for n in names if n != MANIFEST]
        existing = [n for n in names if (self.out / n).exists() or (self.out / n).is_symlink()]
        if not existing:
            return
        owned = self._owned_tops()
        foreign = [n for n in existing if n not in owned]
        if foreign:
            why = "no previous run's manifest lists it" if self.previous is None else \
                "it was not written by the previous run, or changed since"
            raise ValueError(f"out {os.fspath(self.out)!r} already holds {', '.join(foreign)} and {why}; "
                             "sparsify replaces only what it wrote: choose another --out or move it away")

    def __enter__(self) -> "RunDirectory":
        self._created = not self.out.exists()
        self._abort_cleanups = contextlib.ExitStack()      # what a second Ctrl-C removes before the process ends
        if self._created:
            self._abort_cleanups.enter_context(interrupts.cleanup_on_abort(self.out, only_if_empty=True))
        self._abort_cleanups.enter_context(interrupts.cleanup_on_abort(self.stage))
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._abort_cleanups.close()
            raise OutputError(e.errno or errno.EIO, f"out {os.fspath(self.out)!r}: cannot create the directory: "
                                                    f"{e.strerror or e}") from None
        self._clean_stale_stages()
        self.stage.mkdir()
        (self.stage / _STAGING_MARK).write_text(str(os.getpid()), encoding="utf-8")
        return self

    def __exit__(self, *exc: Any) -> None:
        remove_path(self.stage)
        if self._created and not self.committed:       # an output directory this run made and never filled
            with contextlib.suppress(OSError):
                self.out.rmdir()
        self._abort_cleanups.close()

    def _clean_stale_stages(self) -> None:
        """Remove staging directories of runs that died (SIGKILL); only ones marked as ours, of dead processes."""
        for p in self.out.glob(f"{_STAGING_PREFIX}*"):
            mark = p / _STAGING_MARK
            try:
                pid = int(mark.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                continue                       # still running
            except ProcessLookupError:
                remove_path(p)
            except OSError:
                continue

    def staged_names(self) -> list[str]:
        """Top-level names written into the stage so far."""
        return sorted(p.name for p in self.stage.iterdir() if p.name != _STAGING_MARK)

    def final_path(self, staged: str | os.PathLike) -> Path:
        """Where a path inside the stage ends up after the commit."""
        return self.out / Path(staged).relative_to(self.stage)

    def commit(self, info: dict[str, Any] | None = None) -> dict[str, Any]:
        """Move the staged outputs into ``out`` (signals held back), then write the manifest.

        Outputs of the previous run that this run does not write again are
        removed (they are listed in its manifest with the same content);
        anything else in ``out`` is left alone. Under the command's Ctrl-C
        handling, a Ctrl-C that came before stops the run here (``out`` keeps
        the previous run), one during the commit right after it (``out`` holds
        the new run): :class:`~sparsify.cli.interrupts.Interrupted`.

        Returns:
            The manifest written.
        """
        interrupts.check()
        names = self.staged_names()
        self._check_names(names)                      # again: something may have appeared meanwhile
        files: dict[str, Any] = {}
        for n in names:
            entries = _tree_entries(self.stage, n)
            files.update(entries)
        manifest = {"format": "sparsify.run", "version": 1, **(info or {}),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
        owned = self._owned_tops()
        trash = self.stage / ".replaced"
        with signals_deferred():
            trash.mkdir()
            old_manifest = self.out / MANIFEST
            if old_manifest.exists():
                os.replace(old_manifest, trash / MANIFEST)      # from here on: not a complete run until the end
            stale = sorted(owned - set(names))
            for n in names + stale:
                if (self.out / n).exists() and n in owned:
                    os.replace(self.out / n, trash / n)
            for n in names:
                os.replace(self.stage / n, self.out / n)
            with atomic_file(self.out / MANIFEST, "w", encoding="utf-8") as fh:
                json.dump(manifest, fh, indent=2)
            self.committed = True
        remove_path(self.stage)
        interrupts.check()
        return manifest
