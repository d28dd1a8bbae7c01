"""sparsify.patching: one monkeypatch-and-restore for every adapter."""
from __future__ import annotations

import pytest

from sparsify.patching import Patch, patch, patch_of, unpatch


class Tracked:
    """An object whose __setattr__ refuses plain assignments (as a framework's tracking might)."""

    def __setattr__(self, name, value):
        raise RuntimeError("tracked")

    def step(self, x):
        return x + 1


def test_patch_wraps_the_class_method_and_unpatch_removes_the_instance_attribute():
    obj = Tracked()
    calls = []

    def make(original):
        def wrapper(x):
            calls.append(x)
            return original(x) * 2
        return wrapper

    wrapper = patch(obj, "step", make, owner="me")
    assert obj.step is wrapper and obj.step(1) == 4 and calls == [1]
    found = patch_of(obj, "step")
    assert isinstance(found, Patch) and not found.had_instance_attr and found.data == {"owner": "me"}
    assert found.original(3) == 4                                        # the class method, bound
    assert unpatch(obj, "step") and "step" not in vars(obj) and obj.step(1) == 2
    assert not unpatch(obj, "step") and patch_of(obj, "step") is None


def test_an_instance_attribute_is_wrapped_and_given_back():
    obj = Tracked()
    own = lambda x: -x                                                   # noqa: E731
    object.__setattr__(obj, "step", own)
    patch(obj, "step", lambda original: lambda x: original(x) + 100)
    assert obj.step(1) == 99 and patch_of(obj, "step").had_instance_attr
    assert unpatch(obj, "step") and obj.step is own


def test_patching_twice_wraps_the_original_once_and_one_unpatch_restores():
    obj = Tracked()
    patch(obj, "step", lambda original: lambda x: original(x) * 2)
    patch(obj, "step", lambda original: lambda x: original(x) * 3)
    assert obj.step(1) == 6                                              # (1 + 1) * 3: not (1 + 1) * 2 * 3
    assert unpatch(obj, "step") and "step" not in vars(obj) and obj.step(1) == 2


def test_an_attribute_set_by_someone_else_is_not_a_patch():
    obj = Tracked()
    object.__setattr__(obj, "step", lambda x: x)
    assert patch_of(obj, "step") is None and not unpatch(obj, "step") and obj.step(5) == 5


def test_a_missing_attribute_is_an_attribute_error_and_changes_nothing():
    obj = Tracked()
    with pytest.raises(AttributeError):
        patch(obj, "nothing", lambda original: lambda: None)
    assert vars(obj) == {}
