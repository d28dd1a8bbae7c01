"""Keras (``PruningCallback`` in ``model.fit``) against the reference, in tf-keras and Keras 3.

The Keras zoo holds Dense, Conv1D/2D/3D, DepthwiseConv1D/2D, SeparableConv2D,
Conv1D/2D/3DTranspose, Embedding and MultiHeadAttention with the torch zoo's weights (copied by
this test's layout code, forward outputs checked against torch). ``fit`` runs with learning rate 0,
so the weights stay fixed; the masks are read from the callback at the start of every batch,
after its update for that step. ``fit`` runs tf-keras eagerly and Keras 3 compiled (the quicker
way for each), and the other way round for "1x1", so both train steps are covered in both.
"""
import pytest
from parity_zoo import check_parity

PATTERNS = ["1x1", "2x2", "channelx2", "2xchannel", "2:4"]


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("flavor", ["keras3", "tf_keras"])
def test_keras_masks_match_reference(flavor, pattern, scope):
    check_parity(flavor, pattern, scope)
