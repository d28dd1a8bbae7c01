"""Wrap an attribute of one object on the instance, and give it back later: the one monkeypatch-and-restore.

The adapters wrap framework methods on the instance (a model's ``train_step``, an optimizer's ``apply``, a
layer's ``call``, a model's ``save_own_variables``): :func:`patch` installs ``make(original)`` in the object's
``__dict__`` with ``object.__setattr__`` (past any ``__setattr__`` tracking, e.g. Keras'), remembering what it
wraps; :func:`patch_of` finds a wrapper this module installed (with the caller's ``data``); :func:`unpatch`
restores the object as it was: the instance attribute it had, or none (the class's again). Patching an
attribute patched before wraps the same original again, so one :func:`unpatch` always restores the object
(``nest=True`` wraps the patch instead, which :func:`unpatch` then gives back: patches stacked by callers
that each undo their own). ``obj`` may be a class: its own attribute, else the one it inherits, is
wrapped, and the wrapper is set on the class (e.g. a method patched once for every instance).
Framework-neutral: nothing here imports a framework.

Example:
    >>> class Greeter:
    ...     def hello(self):
    ...         return "hello"
    >>> g = Greeter()
    >>> _ = patch(g, "hello", lambda original: lambda: original().upper(), tag="loud")
    >>> g.hello(), patch_of(g, "hello").data
    ('HELLO', {'tag': 'loud'})
    >>> unpatch(g, "hello"), g.hello(), "hello" in vars(g)
    (True, 'hello', False)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Patch", "patch", "patch_of", "unpatch"]

_KEY = "__sparsify_patch__"


@dataclass
class Patch:
    """What :func:`patch` installed.

    Attributes:
        original: what the wrapper wraps: the instance attribute the object had, else the class's (bound)
            (a patched class: its own attribute, else the inherited one).
        had_instance_attr: whether the object had its own instance attribute (restored by :func:`unpatch`).
        data: the caller's keyword arguments to :func:`patch` (state the wrapper and the caller share).
    """

    original: Any
    had_instance_attr: bool
    data: dict = field(default_factory=dict)


def patch_of(obj: Any, name: str) -> Patch | None:
    """The :class:`Patch` of ``obj.<name>`` when :func:`patch` installed it, else None.

    Example:
        >>> class C:
        ...     def f(self):
        ...         return 1
        >>> c = C()
        >>> patch_of(c, "f") is None
        True
    """
    current = getattr(obj, "__dict__", {}).get(name)
    found = getattr(current, _KEY, None) if current is not None else None
    return found if isinstance(found, Patch) else None


def patch(obj: Any, name: str, make: Callable[[Any], Any], *, nest: bool = False, **data: Any) -> Any:
    """Set ``obj.<name>`` (on the instance) to ``make(original)``; returns the wrapper.

    ``original`` is the instance attribute ``obj`` has (the original one when it is a patch already:
    patching again replaces the wrapper), else the class's attribute bound to ``obj``. ``make`` must
    return a new object that takes attributes (a function). ``data`` is kept on the :class:`Patch`.
    With ``nest=True`` a patch already there is wrapped as it is (and given back by :func:`unpatch`).
    When ``obj`` is a class, ``original`` is its own attribute, else the inherited one (as the class
    gives it: a plain function for a method), and the wrapper is set on the class.

    Raises:
        AttributeError: ``obj`` has no attribute ``name``.

    Example:
        >>> class C:
        ...     def f(self, x):
        ...         return x
        >>> c = C()
        >>> _ = patch(c, "f", lambda original: lambda x: original(x) + 1)
        >>> _ = patch(c, "f", lambda original: lambda x: original(x) * 10)     # wraps C.f again, not the patch
        >>> c.f(2), unpatch(c, "f"), c.f(2)
        (20, True, 2)
        >>> _ = patch(c, "f", lambda original: lambda x: original(x) + 1)
        >>> _ = patch(c, "f", lambda original: lambda x: original(x) * 10, nest=True)  # wraps the patch
        >>> c.f(2), unpatch(c, "f"), c.f(2), unpatch(c, "f"), c.f(2)
        (30, True, 3, True, 2)
    """
    previous = None if nest else patch_of(obj, name)
    if previous is not None:
        original, had = previous.original, previous.had_instance_attr
    else:
        original, had = _current(obj, name)
    wrapper = make(original)
    setattr(wrapper, _KEY, Patch(original, had, dict(data)))
    _set(obj, name, wrapper)
    return wrapper


def _current(obj: Any, name: str) -> tuple[Any, bool]:
    """``(obj.<name> as a wrapper wraps it, whether obj has it itself)``."""
    current = getattr(obj, "__dict__", {}).get(name)
    if current is not None:
        return current, True
    if isinstance(obj, type):
        return getattr(obj, name), False
    attr = getattr(type(obj), name)
    return (attr.__get__(obj, type(obj)) if hasattr(attr, "__get__") else attr), False


def _set(obj: Any, name: str, value: Any) -> None:
    """``obj.<name> = value`` past any ``__setattr__`` tracking (type's for a class: object's refuses classes)."""
    if isinstance(obj, type):
        setattr(obj, name, value)
    else:
        object.__setattr__(obj, name, value)


def unpatch(obj: Any, name: str) -> bool:
    """Undo :func:`patch` of ``obj.<name>``: the instance attribute it had back, or none. False if not patched.

    Example:
        >>> class C:
        ...     def f(self):
        ...         return 1
        >>> c = C()
        >>> c.f = lambda: 2                         # the object's own attribute survives a patch
        >>> _ = patch(c, "f", lambda original: lambda: original() + 40)
        >>> c.f(), unpatch(c, "f"), c.f(), unpatch(c, "f")
        (42, True, 2, False)
    """
    found = patch_of(obj, name)
    if found is None:
        return False
    if found.had_instance_attr:
        _set(obj, name, found.original)
    elif isinstance(obj, type):
        delattr(obj, name)
    else:
        del obj.__dict__[name]
    return True
