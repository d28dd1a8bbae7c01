"""Tests for sparsify.patterns.registry: families by name, examples for help texts, errors."""
import numpy as np
import pytest

from pattern_cases import A
from sparsify import PruningConfig
from sparsify.patterns import (Pattern, PatternNInM, PatternNxM, get_pattern, pattern_examples, pattern_family,
                               pattern_summaries, register_pattern, registered_patterns, unregister_pattern)


def test_registry_and_errors():
    assert {"NxM", "N:M"} <= set(registered_patterns())
    with pytest.raises(ValueError, match=r"registered families \('NxM', 'N:M'"):
        get_pattern("diagonal")
    with pytest.raises(ValueError, match="block dimensions must be positive"):
        get_pattern("0x4")
    with pytest.raises(ValueError, match="0 < N < M"):
        get_pattern("4:4")
    with pytest.raises(ValueError, match="pruning_scope must be"):
        get_pattern({"pattern": "1x1", "pruning_scope": "everywhere"})
    with pytest.raises(ValueError, match="must be in"):
        get_pattern("1x1").get_masks({"a": A}, 1.0)
    with pytest.raises(ValueError, match="pre_mask shape"):
        get_pattern("1x1").get_masks({"a": A}, 0.5, {"a": np.ones((2, 2), bool)})


def test_register_custom_pattern_touches_one_place():
    """A new family is one class: get_pattern, PruningConfig (ratio limit included) and help texts follow."""
    @register_pattern("diag-test")
    class Diagonal(PatternNxM):
        examples = ("diag-test",)
        summary = "diag-test: unstructured, the diagonal never pruned, at most 60%"

        @classmethod
        def parse(cls, name):
            return {"rows": 1, "cols": 1} if name == "diag-test" else None

        @property
        def max_ratio(self):
            return 0.6

        def unit_scores(self, score2d):
            return np.where(np.eye(*score2d.shape, dtype=bool), np.inf, score2d), None  # the diagonal is protected

    try:
        m = get_pattern("diag-test").get_mask_single(np.ones((3, 3)), 0.6)
        assert m.diagonal().all() and (~m).sum() == 5
        assert PruningConfig(pattern="diag-test", target_sparsity=0.6).pattern_obj().family == "diag-test"
        with pytest.raises(ValueError, match="target_sparsity for pattern 'diag-test' must be <= 0.6, got 0.7"):
            PruningConfig(pattern="diag-test", target_sparsity=0.7)
        assert "diag-test" in pattern_examples() and pattern_summaries()["diag-test"].startswith("diag-test")
        with pytest.raises(ValueError, match="already registered"):
            register_pattern("diag-test")(PatternNInM)
    finally:
        unregister_pattern("diag-test")
    assert "diag-test" not in registered_patterns()
    with pytest.raises(ValueError, match="not registered"):
        unregister_pattern("diag-test")


def test_config_asks_the_pattern_for_its_ratio_limit():
    with pytest.raises(ValueError, match=r"target_sparsity for pattern '1:4' must be <= N/M = 0.25, got 0.3"):
        PruningConfig(pattern="1:4", target_sparsity=0.3)
    assert PruningConfig(pattern="1:4", target_sparsity=0.25).pattern_obj().max_ratio == 0.25


def test_every_example_builds_and_fits_a_divisible_layer():
    assert registered_patterns()[:2] == ("NxM", "N:M")
    assert pattern_examples("NxM") == PatternNxM.examples and pattern_examples("N:M") == PatternNInM.examples
    assert pattern_examples()[:len(PatternNxM.examples)] == PatternNxM.examples
    w = np.random.default_rng(0).random((8, 16))
    for name in pattern_examples():
        p = get_pattern(name)
        assert type(p).family in registered_patterns() and p.pattern == name
        mask = p.get_mask_single(w, min(0.5, p.max_ratio))
        assert mask.shape == w.shape and not mask.all()
    with pytest.raises(ValueError, match="family must be one of"):
        pattern_examples("diagonal")


def test_summaries_and_family_lookup():
    summaries = pattern_summaries()
    assert set(summaries) == set(registered_patterns())
    assert "channelxM" in summaries["NxM"] and "N pruned of every M" in summaries["N:M"]
    assert pattern_family("4xchannel") == (PatternNxM, {"rows": 4, "cols": None})
    assert pattern_family("1:8") == (PatternNInM, {"N": 1, "M": 8})


def test_unknown_name_lists_families_and_examples():
    with pytest.raises(ValueError, match=r"registered families \('NxM', 'N:M'.*\(e.g. '1x1', '4x1'.*'2:4'"):
        get_pattern("diagonal")


def test_every_pattern_answers_max_ratio():
    assert get_pattern("4x1").max_ratio == 1.0 and get_pattern("2:4").max_ratio == 0.5
    assert get_pattern("1:8").max_ratio == 0.125 and Pattern().max_ratio == 1.0
