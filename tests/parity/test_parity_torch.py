"""torch (``sparsify_torch.prune``) against the reference, on every prunable torch layer type.

The zoo (see ``parity_zoo``) holds Linear, Conv1d/2d/3d (and a grouped Conv2d), depthwise and
separable convs (1-D and 2-D), ConvTranspose1d/2d/3d (and a grouped ConvTranspose2d), Embedding,
EmbeddingBag and MultiheadAttention (fused ``in_proj_weight`` as q, k, v, and separate
``q/k/v_proj_weight`` with kdim = vdim != embed_dim, plus the output projections); masks are compared at every step of a gradual schedule (before the start,
at each update point and between them), and the final weights are the original ones times the
reference's final masks.
"""
import pytest
from parity_zoo import check_parity

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

PATTERNS = ["1x1", "2x2", "1x4", "channelx2", "channelx1", "2xchannel", "1xchannel", "2:4", "1:4"]


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_torch_masks_match_reference(pattern, scope):
    check_parity("torch", pattern, scope)
