"""An update too large for memory fails before it allocates: :func:`check_update_memory`.

A mask update holds at least its masks (one byte a weight, one allocation for
all layers) and, where the scores cannot be computed chunk by chunk, a layer's
scores. :func:`check_update_memory` compares that least need with the memory
the system says is available (:func:`available_memory`: ``MemAvailable`` of
``/proc/meminfo``, capped by a cgroup's limit) and raises a ``MemoryError``
naming the layer, the bytes needed and the bytes available, instead of
NumPy's ``Unable to allocate 1.00 TiB`` naming nothing.

Example:
    >>> check_update_memory({"fc": ((4, 4), 4)}, available=1 << 20)     # 16 bytes of masks: fits
    >>> check_update_memory({"fc": ((1 << 20, 1 << 20), 4)}, available=1 << 30)
    Traceback (most recent call last):
    ...
    MemoryError: the mask update of layer 'fc' (shape (1048576, 1048576)) needs at least 1.00 TiB (1099511627776 bytes: masks 1 byte a weight), but 1.00 GiB (1073741824 bytes) of memory is available; prune it in a process with more memory, or leave it out (excluded_op_names)
"""
from __future__ import annotations

import os
from typing import Mapping

__all__ = ["available_memory", "check_update_memory"]

_MEMINFO = "/proc/meminfo"
_CGROUP = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
_LOOK_FROM = 1 << 26       # needs below 64 MiB are not worth a look at the system (a read of /proc per update)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def available_memory() -> int | None:
    """Bytes of memory this process may still allocate without swapping, or None where the system does not say.

    ``MemAvailable`` of ``/proc/meminfo`` (else the free pages), capped by the room left under a cgroup v2
    limit (``memory.max`` - ``memory.current``).
    """
    found = None
    info = _read(_MEMINFO)
    if info is not None:
        for line in info.splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            found = None
    limit, used = (_read(p) for p in _CGROUP)
    if limit is not None and used is not None and limit.strip().isdigit() and used.strip().isdigit():
        room = max(0, int(limit) - int(used))
        found = room if found is None else min(found, room)
    return found


def _size(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


def check_update_memory(layers: Mapping[str, tuple[tuple[int, ...], int]], scores_whole: bool = False,
                        available: int | None = None) -> None:
    """Raise ``MemoryError`` when an update of ``layers`` (name -> (shape, bytes of a score)) cannot fit.

    The least need is the masks (one byte a weight, all layers at once) and, with ``scores_whole`` (scores
    that are not computed chunk by chunk), the largest layer's scores. ``available``: the bytes free (None:
    :func:`available_memory`; where the system does not say, nothing is checked). The message names the
    largest layer, its shape, the bytes needed and the bytes available.
    """
    if not layers:
        return
    sizes = {n: _count(shape) for n, (shape, _) in layers.items()}
    masks = sum(sizes.values())
    largest = max(sizes, key=lambda n: sizes[n])
    scores = sizes[largest] * int(layers[largest][1]) if scores_whole else 0
    need = masks + scores
    if available is None:
        if need < _LOOK_FROM:
            return
        available = available_memory()
        if available is None:
            return
    if need <= available:
        return
    what = "masks 1 byte a weight" + (f", and its scores {layers[largest][1]} bytes a weight" if scores else "")
    others = len(layers) - 1
    whom = (f"layer {largest!r} (shape {tuple(layers[largest][0])})" if not others else
            f"{len(layers)} layers, the largest {largest!r} (shape {tuple(layers[largest][0])})")
    hint = "prune it in a process with more memory, or leave it out (excluded_op_names)" if not others else \
        "prune them in a process with more memory, or fewer layers at once (op_names / excluded_op_names)"
    raise MemoryError(f"the mask update of {whom} needs at least {_size(need)} ({need} bytes: {what}), but "
                      f"{_size(available)} ({available} bytes) of memory is available; {hint}")


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
