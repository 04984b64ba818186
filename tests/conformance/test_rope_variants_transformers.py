"""RoPE variants beyond the five classic families, against the transformers
class of a model that uses each.

- proportional (p-RoPE): ``ROPE_INIT_FUNCTIONS["proportional"]`` and
  Gemma 4's ``Gemma4TextRotaryEmbedding`` + ``apply_rotary_pos_emb`` on its
  full-attention layers, read from a ``Gemma4TextConfig`` object whose
  full-attention layers have their own head_dim (``per_layer_config``).
"""

import types

import numpy as np
import pytest

import posenc
from posenc import reference


@pytest.fixture(scope="module")
def hf(torch, transformers):
    transformers.logging.set_verbosity_error()
    from transformers import Gemma4TextConfig, LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gemma4 import modeling_gemma4

    return types.SimpleNamespace(
        torch=torch,
        Gemma4TextConfig=Gemma4TextConfig,
        LlamaConfig=LlamaConfig,
        init_functions=ROPE_INIT_FUNCTIONS,
        gemma4=modeling_gemma4,
    )


def _gemma4_config(hf, head_dim=64, global_head_dim=128, fraction=0.25, theta=1e6):
    return hf.Gemma4TextConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        global_head_dim=global_head_dim,
        num_hidden_layers=6,
        intermediate_size=512,
        vocab_size=128,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": fraction,
                "rope_theta": theta,
            },
        },
    )


def _llama_proportional(hf, head_dim, params):
    return hf.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        num_hidden_layers=1,
        intermediate_size=64,
        vocab_size=32,
        rope_parameters=dict(params),
    )


def _expected_frequencies(dim, base, fraction, factor):
    """The head's own frequencies for the first floor(fraction * dim / 2)
    pairs, 0 for the rest, over the factor: written from the definition."""
    kept = int(np.floor(fraction * dim / 2))
    i = np.arange(dim // 2, dtype=np.float64)
    return np.where(i < kept, base ** (-2 * i / dim), 0.0) / factor


@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("factor", [None, 8.0])
def test_proportional_frequencies_equal_transformers(hf, dim, fraction, factor):
    params = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": fraction}
    if factor is not None:
        params["factor"] = factor
    config = _llama_proportional(hf, dim, params)
    want, want_att = hf.init_functions["proportional"](config)
    want = want.double().numpy()
    exact = _expected_frequencies(dim, 1e6, fraction, factor or 1.0)
    for scaling in (dict(params), config):
        got, att = posenc.rope_frequencies(dim, scaling=scaling)
        assert att == want_att == 1.0
        # transformers forms them in float32: zeros exactly where it has them
        np.testing.assert_array_equal(got == 0, want == 0)
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
        np.testing.assert_allclose(got, exact, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        reference.rope_frequencies(dim, scaling=params)[0], exact, rtol=1e-15, atol=0
    )


def _gemma4_rotation(hf, config, x, position_ids, layer_type):
    torch = hf.torch
    rotary = hf.gemma4.Gemma4TextRotaryEmbedding(config)
    xt = torch.from_numpy(x)
    cos, sin = rotary(xt, torch.from_numpy(position_ids), layer_type)
    return hf.gemma4.apply_rotary_pos_emb(xt, cos, sin, unsqueeze_dim=1).numpy()


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_gemma4_full_attention_layers_rotate_as_transformers(hf, fraction):
    config = _gemma4_config(hf, fraction=fraction)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 12, 128)).astype(np.float32)
    # left padding: the second sequence starts three tokens late
    ids = np.stack([np.arange(12), np.maximum(np.arange(12) - 3, 0)]).astype(np.int64)
    want = _gemma4_rotation(hf, config, x, ids, "full_attention")
    got = posenc.apply_rope(x, ids, scaling=config, layer_type="full_attention")
    # transformers' float32 phase at positions < 12: a few float32 ulps
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    # the pairs past the fraction pass through unchanged, in both halves
    kept = int(fraction * 128 // 2)
    np.testing.assert_array_equal(got[..., kept:64], x[..., kept:64])
    np.testing.assert_array_equal(got[..., 64 + kept :], x[..., 64 + kept :])
    # read as partial rotary (the frequencies of a 32-wide head) it is wrong
    partial = posenc.apply_rope(x, ids, base=1e6, rotary_dim=int(fraction * 128))
    assert np.abs(partial - want).max() > 0.5


def test_gemma4_sliding_layers_read_their_own_head_dim(hf):
    config = _gemma4_config(hf)
    x = np.random.default_rng(5).standard_normal((1, 4, 9, 64)).astype(np.float32)
    ids = np.arange(9, dtype=np.int64)[None]
    want = _gemma4_rotation(hf, config, x, ids, "sliding_attention")
    got = posenc.apply_rope(x, ids, scaling=config, layer_type="sliding_attention")
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_gemma4_config_needs_a_layer_type_and_its_head_dim(hf):
    config = _gemma4_config(hf)
    # transformers itself refuses to give one head_dim for every layer
    with pytest.raises(ValueError, match="full_attention"):
        posenc.rope_frequencies(128, scaling=config)
    # the full-attention layers' head_dim is global_head_dim (128), not 64
    with pytest.raises(ValueError, match="128"):
        posenc.apply_rope(np.zeros((1, 4, 3, 64)), scaling=config, layer_type="full_attention")
    inv, _ = posenc.rope_frequencies(128, scaling=config, layer_type="full_attention")
    np.testing.assert_allclose(inv, _expected_frequencies(128, 1e6, 0.25, 1.0), rtol=1e-15)


def test_proportional_rotary_dim_must_be_the_whole_head(hf):
    params = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    x = np.random.default_rng(6).standard_normal((1, 2, 3, 64))
    np.testing.assert_array_equal(
        posenc.apply_rope(x, scaling=params, rotary_dim=64), posenc.apply_rope(x, scaling=params)
    )
    with pytest.raises(ValueError, match="rotary_dim"):
        posenc.apply_rope(x, scaling=params, rotary_dim=16)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        posenc.rope_frequencies(64, scaling=dict(params, partial_rotary_factor=1.5))
