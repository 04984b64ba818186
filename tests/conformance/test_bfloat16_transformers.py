"""bfloat16 RoPE and T5's table gradient against transformers' own modules.

RoPE: LlamaRotaryEmbedding and apply_rotary_pos_emb, run in bfloat16 as a
bfloat16 model runs them (a float32 phase ``position_ids.float() @
inv_freq``, cos and sin rounded to bfloat16, the rotation in bfloat16), and
in float32 on the same bfloat16 inputs.  At small positions they are a
witness of posenc's numbers; at 2**20 their float32 phase is far off, where
posenc's stays one rounding from the exact rotation.

T5: the gradient of T5Attention.compute_bias with respect to its embedding's
weight, by torch's autograd, against posenc.bias.t5_bias_table_grad.
"""

import numpy as np
import pytest
from t5_models import t5_attention

import posenc
from posenc.bias import t5_bias_table_grad

ml_dtypes = pytest.importorskip("ml_dtypes")  # the test extra installs it
BF16 = np.dtype(ml_dtypes.bfloat16)


def to_torch(torch, x):
    """A bfloat16 NumPy array as a torch bfloat16 tensor, bit for bit."""
    return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)


def exact_rotation(x, pos, base=10000.0):
    """The rotation of x (..., seq, dim) at pos (seq,) in float64, "half"
    layout, and max(|a|, |b|) of each output's pair."""
    x = x.astype(np.float64)
    h = x.shape[-1] // 2
    inv = 1.0 / base ** (np.arange(0, 2 * h, 2, dtype=np.float64) / (2 * h))
    angle = np.asarray(pos, np.float64)[:, None] * inv
    c, s = np.cos(angle), np.sin(angle)
    a, b = x[..., :h], x[..., h:]
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.concatenate([a * c - b * s, b * c + a * s], -1), np.concatenate([scale, scale], -1)


def spacings(err, scale):
    """err in units of the bfloat16 spacing at `scale` (the inputs' size)."""
    e = np.floor(np.log2(np.where(scale > 0, scale, 1.0)))
    return err / np.exp2(np.maximum(e, -126.0) - 7.0)


def llama(torch, x, pos, *, dtype):
    """transformers' Llama rotary embedding of x at pos, computed in `dtype`
    (cos and sin from its float32 phase, rounded to `dtype`)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=1024,
        num_attention_heads=8,
        head_dim=x.shape[-1],
        max_position_embeddings=2**21,
        rope_theta=10000.0,
    )
    rotary = LlamaRotaryEmbedding(config)
    q = to_torch(torch, x).to(dtype)
    ids = torch.tensor(np.asarray(pos), dtype=torch.int64)[None]
    cos, sin = rotary(q, ids)
    y, _ = apply_rotary_pos_emb(q, q, cos, sin)
    return y.float().numpy().astype(np.float64), cos.float().numpy()[0]


def test_llama_rotary_in_float32_on_bfloat16_inputs_agrees_within_one_rounding(torch, transformers):
    # at small positions transformers' float32 phase is accurate: its
    # rotation in float32, rounded once, is posenc's but for near-ties
    x = np.random.default_rng(0).standard_normal((1, 8, 512, 128)).astype(BF16)
    pos = np.arange(512)
    ours = posenc.apply_rope(x)
    theirs32, _ = llama(torch, x, pos, dtype=torch.float32)
    theirs = theirs32.astype(np.float32).astype(BF16)
    assert np.mean(ours.view(np.uint16) == theirs.view(np.uint16)) > 0.999
    # elsewhere neighbours (one spacing of the larger apart), except where
    # a b s nearly cancels a c: there their float32 phase (off by up to
    # pos * 2**-24 radians) and their two roundings show
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    exact, scale = exact_rotation(x, pos)
    apart = spacings(np.abs(a - b), np.maximum(np.abs(a), np.abs(b)))
    assert np.all(apart[np.abs(exact) >= 2.0**-6 * scale] <= 1.0)


def test_llama_rotary_in_bfloat16_at_small_positions_and_at_2_20(torch, transformers):
    rng = np.random.default_rng(1)
    for start, theirs_at_most, theirs_at_least in [(0, 3.0, 0.0), (2**20 - 512, None, 10.0)]:
        x = rng.standard_normal((1, 8, 512, 128)).astype(BF16)
        pos = start + np.arange(512)
        exact, scale = exact_rotation(x, pos)
        ours = posenc.apply_rope(x, pos).astype(np.float64)
        theirs, cos = llama(torch, x, pos, dtype=torch.bfloat16)
        our_err = np.max(spacings(np.abs(ours - exact), scale))
        their_err = np.max(spacings(np.abs(theirs - exact), scale))
        assert our_err <= 1.0 + 2.0**-12  # one rounding, at any position
        if theirs_at_most is not None:  # three roundings of bfloat16 arithmetic
            assert their_err <= theirs_at_most
        assert their_err >= theirs_at_least
    # at 2**20 the float32 phase itself is off by hundredths of a radian:
    # transformers' cos is off by ~16 bfloat16 spacings, posenc's by half of one
    inv = 1.0 / 10000.0 ** (np.arange(0, 128, 2) / 128)
    exact_cos = np.cos(pos[:, None] * inv)
    assert np.max(np.abs(cos[:, :64] - exact_cos)) > 0.03
    our_cos, _ = posenc.rope_cos_sin(pos, 128, dtype="bfloat16")
    assert np.max(np.abs(our_cos[:, :64].astype(np.float64) - exact_cos)) <= 2.0**-9


def test_a_bfloat16_phase_has_no_correct_digit_at_2_20(torch):
    # the phase formed in bfloat16 (positions and inv_freq cast to it, as
    # models whose buffers follow the model's dtype do): 2**20 + k is not
    # even a bfloat16 for most k (spacing 2**13 there)
    pos = 2**20 + np.arange(0, 4096, 7)
    inv = 1.0 / 10000.0 ** (np.arange(0, 128, 2) / 128)
    t = torch.tensor(pos, dtype=torch.float32).to(torch.bfloat16)[:, None]
    phase = (t * torch.tensor(inv, dtype=torch.float32).to(torch.bfloat16)).float().numpy()
    exact = pos[:, None] * inv
    err = np.abs(np.cos(phase.astype(np.float64)) - np.cos(exact))
    assert np.max(err) > 1.0  # cos has no correct digit
    ours, _ = posenc.rope_cos_sin(pos, 128, dtype="bfloat16")
    assert np.max(np.abs(ours[:, :64].astype(np.float64) - np.cos(exact))) <= 2.0**-9


# ---------------------------------------------------------------- T5's table gradient


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("q_len, k_len, past", [(50, 50, 0), (1, 700, 699), (37, 300, 263)])
def test_t5_table_grad_equals_autograd_through_compute_bias(
    torch, transformers, is_decoder, dtype, q_len, k_len, past
):
    n_heads, num_buckets, max_distance = 6, 32, 128
    attention = t5_attention(torch, is_decoder, num_buckets, max_distance, n_heads)
    attention = attention.to(getattr(torch, dtype))
    weight = attention.relative_attention_bias.weight
    g = np.random.default_rng(q_len).standard_normal((3, n_heads, q_len, k_len)).astype(dtype)

    def autograd(upstream):  # the scores of a batch of 3 take the bias
        weight.grad = None
        bias = attention.compute_bias(q_len, k_len, past_seen_tokens=past)  # (1, heads, q, k)
        (bias * torch.from_numpy(upstream)).sum().backward()
        return weight.grad.numpy().copy()

    theirs, mag = autograd(g), autograd(np.abs(g))
    ours = t5_bias_table_grad(
        g, num_buckets, bidirectional=not is_decoder, max_distance=max_distance, q_offset=past
    )
    assert ours.dtype == theirs.dtype
    # sums of the same terms in different orders: as close as two float32
    # (float64) sums of them can be
    eps = 2.0**-53 if dtype == "float64" else 2.0**-24
    n = 3 * q_len + q_len + k_len
    assert np.all(np.abs(ours - theirs) <= 2 * n * eps * mag)
    np.testing.assert_array_equal(ours == 0, theirs == 0)
