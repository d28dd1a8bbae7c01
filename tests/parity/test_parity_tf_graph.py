"""TF graph mode against the reference, for the op types it prunes: the high-level
``sparsify_tf.prune_graph`` and the seed API (``get_or_create_ks_scheduled_graph_ops`` with the
pattern and scope as ``mask_creator``, global scope included).

A tf.compat.v1 graph computes the zoo's layers with ``MatMul`` in four forms (``x @ W``,
``x @ W^T``, ``W @ x^T``, ``W^T @ x^T``), ``BatchMatMulV2`` (``x @ W``, 3-D x),
``Conv2D`` (square, non-square and grouped kernels, the separable pointwise kernel), ``Conv3D``,
``DepthwiseConv2dNative`` (depthwise and separable) and ``Conv2DBackpropInput`` (transposed conv)
on variables copied from torch (forward outputs checked against torch first). Masks are read from
the graph's mask variables after ``update_op`` at every step, in the TF layout, and converted with
this test's own layout code.
"""
import pytest
from parity_zoo import check_parity

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

PATTERNS = ["1x1", "2x2", "channelx2", "2xchannel", "2:4"]


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("api", ["tf_graph", "tf_seed_api"])
def test_tf_graph_masks_match_reference(api, pattern, scope):
    check_parity(api, pattern, scope)
