"""Fixtures for the Keras callback tests (tf-keras and Keras 3)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from _keras_helpers import FLAVORS, kmod


@pytest.fixture(params=FLAVORS)
def K(request):
    """The Keras package under test (tf_keras or keras)."""
    return kmod(request.param)


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's bundled digits: X (n, 64) in [0, 1], y int (n,)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype("float32"), d.target.astype("int32")


# Keras 3 has no in-graph update (every backend updates on the host, sparsify_keras): the tests that
# run a path with update_in_graph=True exist for tf-keras only, and are not collected for Keras 3.
_GRAPH_PARAMS = ("in_graph", "first_in_graph")
_GRAPH_ONLY_TESTS = ("test_resume_across_update_paths_equals_uninterrupted",
                     "test_mask_update_built_once_and_step_read_only_when_an_update_may_be_due",   # TF's applier
                     "test_updates_in_the_train_step_need_no_host_work_between_epoch_starts",
                     "test_nan_weights_at_an_update_in_the_train_step_name_the_layer_and_change_nothing",
                     "test_in_graph_and_host_updates_give_the_same_weights_masks_and_sums")


# Keras 3 updates on the host, so with steps_per_execution=3 an update waiting for Wanda's first batch applies
# at the next block start (step 3: a window of 3 batches), not after step 0 as in-graph (docs/keras.md).
_GRAPH_ONLY_IDS = ("test_xla_and_several_steps_per_execution_record_the_same_statistics[keras3-spe3]",)


def _tf_keras_only(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("K") != "keras3":
        return False
    return (any(params.get(p) is True for p in _GRAPH_PARAMS) or item.originalname in _GRAPH_ONLY_TESTS
            or item.name in _GRAPH_ONLY_IDS)


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if _tf_keras_only(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not _tf_keras_only(item)]
