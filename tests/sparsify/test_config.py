import dataclasses

import pytest
import yaml

from sparsify.config import PruningConfig
from sparsify.patterns import PatternNInM, PatternNxM
from sparsify.schedules import ConstantSchedule, DecaySchedule, GradualSchedule


def test_defaults_and_roundtrip():
    cfg = PruningConfig()
    assert cfg.target_sparsity == 0.9 and cfg.pattern == "1x1" and cfg.pruning_scope == "local"
    assert PruningConfig.from_dict(cfg.to_dict()) == cfg
    custom = PruningConfig(target_sparsity=0.5, pattern="2:4", pruning_scope="global", op_names=["conv"],
                           excluded_op_names=["head"], criterion="snip_momentum", sparsity_decay_type="cos")
    assert PruningConfig.from_dict(custom.to_dict()) == custom


def test_yaml_roundtrip(tmp_path):
    cfg = PruningConfig(target_sparsity=0.75, pattern="4x1", end_step=300, pruning_frequency=10)
    path = tmp_path / "cfg.yaml"
    cfg.to_yaml(path)
    assert PruningConfig.from_yaml(path) == cfg
    nested = tmp_path / "nested.yaml"
    nested.write_text(yaml.safe_dump({"pruning": {"target_sparsity": 0.5}}))
    assert PruningConfig.from_yaml(nested).target_sparsity == 0.5
    assert PruningConfig.coerce(str(path)) == cfg


def test_yaml_unquoted_n_in_m_pattern_stays_a_string(tmp_path):
    path = tmp_path / "nm.yaml"
    path.write_text("pattern: 2:4\ntarget_sparsity: 0.5\nend_step: 1_000\nleave_enabled: false\n")
    cfg = PruningConfig.from_yaml(path)
    assert (cfg.pattern, cfg.target_sparsity, cfg.end_step, cfg.leave_enabled) == ("2:4", 0.5, 1000, False)


def test_yaml_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        PruningConfig.from_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("target_sparsity: [0.5\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        PruningConfig.from_yaml(bad)
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text("target_sparsity: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        PruningConfig.from_yaml(unsafe)


def test_derived_objects():
    assert isinstance(PruningConfig().schedule(), GradualSchedule)
    assert isinstance(PruningConfig(sparsity_decay_type="constant", end_step=-1).schedule(), ConstantSchedule)
    assert isinstance(PruningConfig(sparsity_decay_type="exp").schedule(), DecaySchedule)
    assert isinstance(PruningConfig(pattern="4x1").pattern_obj(), PatternNxM)
    p = PruningConfig(pattern="2:4", target_sparsity=0.5, pruning_scope="global").pattern_obj()
    assert isinstance(p, PatternNInM) and p.is_global
    assert PruningConfig().replace(pattern="1x16").pattern == "1x16"


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(target_sparsity=1.0), ValueError, r"target_sparsity must be in \[0, 1\), got 1.0"),
    (dict(target_sparsity=-0.1), ValueError, r"target_sparsity must be in \[0, 1\), got -0.1"),
    (dict(target_sparsity=float("nan")), ValueError, "target_sparsity must be in"),
    (dict(target_sparsity="0.5"), TypeError, "target_sparsity must be a number"),
    (dict(target_sparsity=True), TypeError, "target_sparsity must be a number"),
    (dict(start_step=10, end_step=5), ValueError, r"end_step must be >= start_step \(10\), got 5"),
    (dict(start_step=-1), ValueError, "start_step must be >= 0"),
    (dict(pruning_frequency=2.5), TypeError, "pruning_frequency must be an integer, got 2.5"),
    (dict(end_step="100"), TypeError, "end_step must be an integer"),
    (dict(pattern="3x3x3"), ValueError, "pattern: pattern must be one of the registered families"),
    (dict(pattern=4), TypeError, "pattern must be a string"),
    (dict(pattern="4:2"), ValueError, "0 < N < M"),
    (dict(pattern="2:2"), ValueError, "0 < N < M"),
    (dict(pattern="0x4"), ValueError, "block dimensions must be positive"),
    (dict(pattern="2:4", target_sparsity=0.6), ValueError, r"must be <= N/M = 0.5, got 0.6"),
    (dict(pruning_scope="globl"), ValueError, r"pruning_scope must be one of \('global', 'local', 'row', 'erk'\), got 'globl' \(did you mean 'global'\?\)"),
    (dict(criterion="magnitud"), ValueError, "did you mean 'magnitude'"),
    (dict(criterion="hessian"), ValueError, "criterion must be one of"),
    (dict(sparsity_decay_type="sine"), ValueError, "sparsity_decay_type must be one of"),
    (dict(block_score_reduce="median"), ValueError, "block_score_reduce must be one of"),
    (dict(max_sparsity_ratio_per_layer=1.5), ValueError, "max_sparsity_ratio_per_layer must be in"),
    (dict(min_sparsity_ratio_per_layer=0.9, max_sparsity_ratio_per_layer=0.5), ValueError, "min_sparsity_ratio_per_layer"),
    (dict(init_sparsity=0.95, target_sparsity=0.5), ValueError, "init_sparsity"),
    (dict(exponent=0), ValueError, "exponent must be a positive number"),
    (dict(leave_enabled="yes"), TypeError, "leave_enabled must be True or False"),
    (dict(monotone=1), TypeError, "monotone must be True or False"),
    (dict(op_names="conv("), ValueError, "op_names holds an invalid regular expression"),
    (dict(excluded_op_names=[3]), TypeError, "excluded_op_names must be a list"),
    (dict(criterion_momentum=1.0), ValueError, "criterion_momentum must be in"),
])
def test_every_field_is_validated(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PruningConfig(**kwargs)


def test_every_field_has_a_validation_case():
    names = {f.name for f in dataclasses.fields(PruningConfig)}
    covered = {"target_sparsity", "start_step", "end_step", "pruning_frequency", "pattern", "pruning_scope",
               "criterion", "sparsity_decay_type", "block_score_reduce", "max_sparsity_ratio_per_layer",
               "min_sparsity_ratio_per_layer", "init_sparsity", "exponent", "leave_enabled", "monotone",
               "op_names", "excluded_op_names", "criterion_momentum", "skip_incompatible_layers",
               "regrowth", "regrowth_fraction", "pruned_gradient",   # these three: tests/sparsify/test_regrowth.py
               "pruned_decay",                                           # test_pruned_decay_is_validated
               "num_threads"}                                            # tests/sparsify/test_threads.py
    assert names == covered
    with pytest.raises(TypeError, match="skip_incompatible_layers must be True or False"):
        PruningConfig(skip_incompatible_layers="no")


def test_unknown_keys_get_a_hint():
    with pytest.raises(ValueError, match=r"unknown config key 'target_sparsty' \(did you mean 'target_sparsity'\?\)"):
        PruningConfig.from_dict({"target_sparsty": 0.5})
    with pytest.raises(ValueError, match="unknown config key 'zzz'; allowed keys: target_sparsity"):
        PruningConfig.from_dict({"zzz": 1})
    with pytest.raises(TypeError, match="config must be a dict"):
        PruningConfig.from_dict([("a", 1)])
    with pytest.raises(TypeError, match="config must be a PruningConfig, a dict or a YAML file path"):
        PruningConfig.coerce(3)


def test_string_op_names_become_a_list():
    assert PruningConfig(op_names="conv").op_names == ["conv"]


@pytest.mark.parametrize("key, value", [("end_step", 10 ** 30), ("start_step", 2 ** 62), ("pruning_frequency", -2 ** 63)])
def test_steps_must_fit_in_64_bits(key, value):
    with pytest.raises(ValueError, match=rf"{key} must be in \[-2\*\*62, 2\*\*62\) \(steps are 64-bit integers\)"):
        PruningConfig(**{key: value})


def test_target_sparsity_defaults_to_the_patterns_maximum(tmp_path):
    assert PruningConfig().target_sparsity == 0.9
    assert PruningConfig(pattern="2:4").target_sparsity == 0.5
    assert PruningConfig(pattern="1:4").target_sparsity == 0.25
    path = tmp_path / "prune.yaml"
    path.write_text("pattern: 2:4\nend_step: 300\n")          # a YAML without target_sparsity: the same rule
    cfg = PruningConfig.from_yaml(path)
    assert cfg.target_sparsity == 0.5 and PruningConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(pruned_decay=-1e-4), ValueError, r"pruned_decay must be a finite number >= 0, got -0.0001"),
    (dict(pruned_decay=float("nan")), ValueError, r"pruned_decay must be a finite number >= 0, got nan"),
    (dict(pruned_decay=float("inf")), ValueError, r"pruned_decay must be a finite number >= 0, got inf"),
    (dict(pruned_decay="2e-4"), TypeError, r"pruned_decay must be a number >= 0, got '2e-4' \(str\)"),
    (dict(pruned_decay=True), TypeError, r"pruned_decay must be a number >= 0, got True \(bool\)"),
    (dict(pruned_decay=2e-4), ValueError, r"pruned_decay=0.0002 decays the pruned weights through their gradient, "
                                          r"which only pruned_gradient='straight_through' gives them \(got "
                                          r"pruned_gradient='none'\)"),
])
def test_pruned_decay_is_validated(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PruningConfig(**kwargs)


def test_pruned_decay_round_trips_and_is_fingerprinted(tmp_path):
    from sparsify.protocol import config_fingerprint, fingerprint_differences

    sr = PruningConfig(pattern="2:4", pruned_gradient="straight_through", pruned_decay=2e-4, pruning_frequency=1,
                       monotone=False)
    assert PruningConfig().pruned_decay == 0.0 and PruningConfig(pruned_decay=0).pruned_decay == 0.0
    assert sr.to_dict()["pruned_decay"] == 2e-4 and PruningConfig.from_dict(sr.to_dict()) == sr
    sr.to_yaml(tmp_path / "sr.yaml")
    assert PruningConfig.from_yaml(tmp_path / "sr.yaml") == sr
    assert fingerprint_differences(sr.replace(pruned_decay=0.0), config_fingerprint(sr)) == ["pruned_decay"]
