"""tf-keras (``PruningCallback`` in ``model.fit``) against the reference (Keras 3: test_parity_keras3.py).

The Keras zoo holds Dense, Conv1D/2D/3D (and a grouped Conv2D), DepthwiseConv1D/2D,
SeparableConv1D/2D, Conv1D/2D/3DTranspose, Embedding and MultiHeadAttention (self-attention, and
cross-attention with another key/value width) with the torch zoo's weights (copied by this test's
layout code, forward outputs checked against torch). ``fit`` runs with learning rate 0,
so the weights stay fixed; the masks are read from the callback at the start of every batch,
after its update for that step. ``fit`` runs tf-keras eagerly and Keras 3 compiled (the quicker
way for each), and the other way round for "1x1", so both train steps are covered in both.
"""
import pytest
from parity_zoo import KERAS_VARIANTS, check_keras_variant, check_parity

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

PATTERNS = ["1x1", "2x2", "channelx2", "2xchannel", "2:4"]


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_tf_keras_masks_match_reference(pattern, scope):
    check_parity("tf_keras", pattern, scope)


@pytest.mark.parametrize("pattern,scope", [("1x1", "global"), ("2:4", "local")])
@pytest.mark.parametrize("variant", sorted(KERAS_VARIANTS))
def test_tf_keras_variants_match_keras3(variant, pattern, scope):
    """straight_through (with SR-STE's decay) and snip on tf-keras: the masks equal Keras 3's at every step."""
    check_keras_variant(variant, pattern, scope)

