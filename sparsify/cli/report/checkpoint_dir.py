"""Which checkpoint a TensorFlow checkpoint directory means: the prefix its ``checkpoint`` state file names.

A directory is read the way ``tf.train.latest_checkpoint`` reads it: through
its ``checkpoint`` state file. Without that file nothing says which of the
checkpoints inside is meant (a copied or half-deleted run directory), so the
directory is refused with one line that names what is missing and the
prefixes found, even when there is only one, so the report never reads a
checkpoint the user did not name. Prefixes sort by their numbers
(``ckpt-9`` before ``ckpt-10``); the last one is the one suggested.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> for f in ("model.ckpt-9.index", "model.ckpt-9.data-00000-of-00001", "model.ckpt-10.index"):
    ...     open(os.path.join(d, f), "w").close()
    >>> checkpoint_prefixes(d)
    ['model.ckpt-9', 'model.ckpt-10']
    >>> try:
    ...     directory_checkpoint_prefix(d)
    ... except ValueError as e:
    ...     print(str(e).replace(d, "DIR"))
    'DIR' is missing its 'checkpoint' state file (which names the latest checkpoint) and holds 2 checkpoints (model.ckpt-9, model.ckpt-10 [no .data shard]); pass one prefix, e.g. 'DIR/model.ckpt-10'
"""
from __future__ import annotations

import os
import re

__all__ = ["STATE_FILE", "checkpoint_prefixes", "data_shard_prefixes", "directory_checkpoint_prefix"]

#: The state file of a checkpoint directory (written by ``tf.train.Saver`` / ``CheckpointManager``).
STATE_FILE = "checkpoint"

_DATA_SHARD = re.compile(r"(.+)\.data-\d+-of-\d+")
_SHOWN = 6                                         # prefixes named in a message before "and N more"


def _natural(name: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except OSError as e:
        raise ValueError(f"{d!r} cannot be listed: {e.strerror}") from None


def checkpoint_prefixes(d: str) -> list[str]:
    """The prefixes of the checkpoints in ``d`` (one per ``*.index`` file), numbers in numeric order."""
    return sorted((f[: -len(".index")] for f in _listdir(d) if f.endswith(".index") and len(f) > len(".index")),
                  key=_natural)


def data_shard_prefixes(d: str) -> list[str]:
    """The prefixes of the checkpoint data shards (``PREFIX.data-00000-of-00001``) in ``d``, in numeric order."""
    return sorted({m.group(1) for f in _listdir(d) if (m := _DATA_SHARD.fullmatch(f))}, key=_natural)


def _named(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _from_state_file(d: str, state: str) -> str:
    try:
        with open(state, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError as e:
        raise ValueError(f"{d!r}: its {STATE_FILE!r} file cannot be read: {e.strerror}") from None
    m = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', text, flags=re.M)
    if not m:
        raise ValueError(f"{d!r}: its {STATE_FILE!r} state file names no model_checkpoint_path; "
                         "pass the checkpoint prefix")
    prefix = m.group(1) if os.path.isabs(m.group(1)) else os.path.join(d, m.group(1))
    if not os.path.isfile(prefix + ".index"):
        raise ValueError(f"{d!r}: its {STATE_FILE!r} state file names {m.group(1)!r}, but "
                         f"{prefix + '.index'!r} is missing")
    return prefix


def directory_checkpoint_prefix(d: str) -> str:
    """The prefix of the checkpoint directory ``d`` means: the one its ``checkpoint`` state file names.

    Raises:
        ValueError: one line naming what is missing: the state file (listing the checkpoint
            prefixes found and the path to pass instead, also the SavedModel directory for a
            SavedModel's ``variables/``, or the data shards whose ``.index`` file is missing),
            the state file's entry, or the ``.index`` file it names.
    """
    state = os.path.join(d, STATE_FILE)
    if os.path.isfile(state):
        return _from_state_file(d, state)
    missing = f"{d!r} is missing its {STATE_FILE!r} state file (which names the latest checkpoint)"
    prefixes, shards = checkpoint_prefixes(d), data_shard_prefixes(d)
    if prefixes:
        shown = [p if p in shards else f"{p} [no .data shard]" for p in prefixes]
        orphans = [s for s in shards if s not in prefixes]
        also = f" and data shards without an .index file ({_named(orphans)})" if orphans else ""
        n = len(prefixes)
        how = "pass its prefix instead:" if n == 1 else "pass one prefix, e.g."
        parent = os.path.dirname(os.path.abspath(d))
        saved_model = f" (or its SavedModel directory {parent!r})" \
            if os.path.isfile(os.path.join(parent, "saved_model.pb")) else ""
        raise ValueError(f"{missing} and holds {n} checkpoint{'s' if n > 1 else ''} ({_named(shown)}){also}; "
                         f"{how} {os.path.join(d, prefixes[-1])!r}{saved_model}")
    if shards:
        whose = "whose .index file is" if len(shards) == 1 else "whose .index files are"
        raise ValueError(f"{missing} and every *.index file: it holds only the checkpoint data shards of "
                         f"{_named(shards)}, {whose} missing (a checkpoint is read through PREFIX.index)")
    inside = sorted(_listdir(d), key=_natural)
    holds = f"it holds {_named(inside)}" if inside else "it is empty"
    raise ValueError(f"{d!r} holds no TensorFlow checkpoint: no {STATE_FILE!r} state file and no *.index file; "
                     f"{holds}")
