"""sparsify.patching: patching a class (its own or an inherited method) and nested patches (``nest=True``)."""
from __future__ import annotations

from sparsify.patching import patch, patch_of, unpatch


class Base:
    def run(self, x):
        return x + 1


class Child(Base):
    pass


class Own(Base):
    def run(self, x):
        return x * 2


def _times_ten(original):
    def run(self, x):
        return original(self, x) * 10
    run.marker = True
    return run


def test_an_inherited_method_is_wrapped_on_the_class_and_unpatch_removes_it():
    base_run = vars(Base)["run"]
    wrapper = patch(Child, "run", _times_ten, why="once")
    try:
        assert Child.run is wrapper and "run" in vars(Child) and Child().run(1) == 20
        assert Base().run(1) == 2 and vars(Base)["run"] is base_run         # the base class is left alone
        found = patch_of(Child, "run")
        assert found.original is Base.run and not found.had_instance_attr and found.data == {"why": "once"}
        assert patch_of(Base, "run") is None
    finally:
        assert unpatch(Child, "run")
    assert "run" not in vars(Child) and Child.run is Base.run and not unpatch(Child, "run")


def test_a_class_s_own_method_is_wrapped_and_given_back():
    own = vars(Own)["run"]
    patch(Own, "run", _times_ten)
    try:
        assert Own().run(3) == 60 and patch_of(Own, "run").had_instance_attr
    finally:
        assert unpatch(Own, "run")
    assert vars(Own)["run"] is own and Own().run(3) == 6


def test_nest_wraps_the_patch_and_each_unpatch_gives_back_one_layer():
    class Obj:
        def step(self, x):
            return x

    obj = Obj()
    outer = patch(obj, "step", lambda original: lambda x: original(x) + 1)
    inner = patch(obj, "step", lambda original: lambda x: original(x) * 10, nest=True)
    assert obj.step(2) == 30 and patch_of(obj, "step").original is outer
    assert unpatch(obj, "step") and obj.step is outer and obj.step(2) == 3
    assert unpatch(obj, "step") and "step" not in vars(obj) and obj.step(2) == 2
    assert inner is not outer and not unpatch(obj, "step")


def test_without_nest_a_second_patch_still_replaces_the_first():
    class Obj:
        def step(self, x):
            return x

    obj = Obj()
    patch(obj, "step", lambda original: lambda x: original(x) + 1)
    patch(obj, "step", lambda original: lambda x: original(x) * 10)
    assert obj.step(2) == 20 and unpatch(obj, "step") and obj.step(2) == 2
