"""TF graph mode (``sparsify_tf.prune_graph``) against the reference, for the op types it prunes.

A tf.compat.v1 graph computes the zoo's layers with ``MatMul`` (Dense, the attention projections),
``Conv2D`` (square and non-square kernels, the separable pointwise kernel), ``Conv3D``,
``DepthwiseConv2dNative`` (depthwise and separable) and ``Conv2DBackpropInput`` (transposed conv)
on variables copied from torch (forward outputs checked against torch first). Masks are read from
the graph's mask variables after ``update_op`` at every step, in the TF layout, and converted with
this test's own layout code.
"""
import pytest
from parity_zoo import check_parity

PATTERNS = ["1x1", "2x2", "channelx2", "2xchannel", "2:4"]


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_tf_graph_masks_match_reference(pattern, scope):
    check_parity("tf_graph", pattern, scope)
