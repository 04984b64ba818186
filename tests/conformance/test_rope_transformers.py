"""posenc's RoPE against transformers' own code.

- rope_frequencies against transformers' init functions (ROPE_INIT_FUNCTIONS
  and the models' compute_default_rope_parameters) for every family;
- apply_rope against the rotation of transformers' Llama and GPT-NeoX
  (half layout) and GPT-J (interleaved layout), both run in float64 on the
  same inputs;
- in float32, against the models' whole rotary path (their rotary embedding
  module forming the phase in float32, then apply_rotary_pos_emb): the two
  differ by no more than transformers' own float32 phase error.
"""

import math

import numpy as np
import pytest

import posenc
from posenc import reference

MAX_POS = 32768

FAMILIES = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "linear-old-key": {"type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096},
    "yarn-deepseek": {
        "rope_type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
    },
    "yarn-untruncated": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 8192,
        "truncate": False,
        "beta_fast": 16,
    },
    "yarn-attention-factor": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 8192,
        "attention_factor": 1.25,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "longrope": "longrope",  # built per dim below
}


def _scaling(name, dim):
    s = FAMILIES[name]
    if s == "longrope":
        rng = np.random.default_rng(dim)
        s = {
            "rope_type": "longrope",
            "short_factor": [float(v) for v in 1 + rng.uniform(0, 0.2, dim // 2)],
            "long_factor": [float(v) for v in 1 + rng.uniform(0, 8, dim // 2)],
            "original_max_position_embeddings": 4096,
        }
    return s


def _llama_config(hf, dim, base, scaling):
    params = dict(scaling or {"rope_type": "default"}, rope_theta=base)
    return hf.LlamaConfig(
        hidden_size=2 * dim,
        num_attention_heads=2,
        head_dim=dim,
        max_position_embeddings=MAX_POS,
        rope_parameters=params,
    )


def _posenc_scaling(scaling):
    """The same dict, plus the config value transformers reads from the model config."""
    return dict(scaling or {}, max_position_embeddings=MAX_POS)


def _hf_frequencies(hf, config, seq_len):
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        inv, af = hf.llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv, af = hf.init_functions[kind](config, None, seq_len=seq_len)
    return inv.double().numpy(), af


def _float32_rtol(base):
    """transformers forms the frequencies in float32: the exponent 2i/dim is
    rounded (a relative error of 2**-24 in the exponent becomes ln(base) *
    2**-24 in base**exponent), then a few more roundings."""
    return (8 + 2 * math.log(base)) * 2.0**-24


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("dim,base", [(64, 10000.0), (128, 500000.0), (96, 1e6), (80, 10000.0)])
@pytest.mark.parametrize("seq_len", [None, 2048, 40000])
def test_frequencies_equal_transformers_init_functions(hf, name, dim, base, seq_len):
    scaling = _scaling(name, dim)
    want, want_af = _hf_frequencies(hf, _llama_config(hf, dim, base, scaling), seq_len)
    got, got_af = posenc.rope_frequencies(
        dim, base=base, scaling=_posenc_scaling(scaling), seq_len=seq_len
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=_float32_rtol(base), atol=0)
    assert got_af == want_af  # the attention factor exactly


@pytest.mark.parametrize("name", ["default", "linear", "yarn", "dynamic"])
@pytest.mark.parametrize("partial", [0.25, 0.5])
def test_partial_rotary_frequencies_equal_transformers(hf, name, partial):
    scaling = dict(_scaling(name, 128) or {"rope_type": "default"}, partial_rotary_factor=partial)
    config = hf.GPTNeoXConfig(
        hidden_size=256,
        num_attention_heads=2,
        max_position_embeddings=MAX_POS,
        rope_parameters=dict(scaling, rope_theta=10000.0),
    )
    if name == "default":
        want, want_af = hf.neox.GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
        want = want.double().numpy()
    else:
        want, want_af = _hf_frequencies(hf, config, 40000)
    got, got_af = posenc.rope_frequencies(128, scaling=_posenc_scaling(scaling), seq_len=40000)
    assert got.shape == want.shape == (int(128 * partial) // 2,)
    np.testing.assert_allclose(got, want, rtol=_float32_rtol(10000.0), atol=0)
    assert got_af == want_af


# ---------------------------------------------------------------- the rotation in float64


def _cos_sin64(inv_freq, position_ids, attention=1.0):
    """cos, sin as Llama's rotary embedding forms them (cat(freqs, freqs)),
    but in float64."""
    freqs = position_ids[..., None].astype(np.float64) * inv_freq
    emb = np.concatenate([freqs, freqs], -1)
    return np.cos(emb) * attention, np.sin(emb) * attention


@pytest.mark.parametrize("seq_axis", [-2, -3])
@pytest.mark.parametrize("name", ["default", "yarn", "llama3"])
def test_apply_rope_equals_llama_apply_rotary_pos_emb_in_float64(hf, seq_axis, name):
    torch = hf.torch
    rng = np.random.default_rng(1)
    b, h, s, d = 2, 4, 50, 64
    shape = (b, h, s, d) if seq_axis == -2 else (b, s, h, d)
    q, k = rng.standard_normal(shape), rng.standard_normal(shape)
    position_ids = np.stack([np.arange(s) + 1000, np.maximum(np.arange(s) - 7, 0)])  # left pad
    scaling = _scaling(name, d)
    inv_freq, af = posenc.rope_frequencies(d, scaling=scaling)
    cos, sin = _cos_sin64(inv_freq, position_ids, af)
    unsqueeze = 1 if seq_axis == -2 else 2
    q_hf, k_hf = hf.llama.apply_rotary_pos_emb(
        torch.from_numpy(q),
        torch.from_numpy(k),
        torch.from_numpy(cos),
        torch.from_numpy(sin),
        unsqueeze_dim=unsqueeze,
    )
    pos = position_ids[:, None, :] if seq_axis == -2 else position_ids[:, :, None]
    for x, want in [(q, q_hf), (k, k_hf)]:
        got = posenc.apply_rope(x, pos, scaling=scaling, seq_axis=seq_axis)
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-14 * np.abs(x).max())


def test_partial_apply_rope_equals_gpt_neox_apply_rotary_pos_emb_in_float64(hf):
    torch = hf.torch
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 30, 80))
    position_ids = np.stack([np.arange(30), np.arange(30) + 500])
    inv_freq, _ = posenc.rope_frequencies(20)  # rotary_dim 20 = 80 * 0.25
    cos, sin = _cos_sin64(inv_freq, position_ids)
    want, _ = hf.neox.apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(cos), torch.from_numpy(sin)
    )
    got = posenc.apply_rope(q, position_ids[:, None, :], rotary_dim=20)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-14 * np.abs(q).max())
    got = posenc.apply_rope(q, position_ids[:, None, :], scaling={"partial_rotary_factor": 0.25})
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-14 * np.abs(q).max())


@pytest.mark.parametrize("rotary_dim", [None, 32])
def test_interleaved_apply_rope_equals_gptj_rotary_in_float64(hf, rotary_dim):
    torch = hf.torch
    rng = np.random.default_rng(3)
    b, s, h, d = 2, 40, 3, 64
    r = rotary_dim or d
    x = rng.standard_normal((b, s, h, d))  # GPT-J rotates (batch, seq, heads, head_dim)
    position_ids = np.stack([np.arange(s) + 3, np.arange(s) * 2])
    inv_freq, _ = posenc.rope_frequencies(r)
    angle = position_ids[..., None] * inv_freq
    sin, cos = torch.from_numpy(np.sin(angle)), torch.from_numpy(np.cos(angle))
    xt = torch.from_numpy(x)
    if rotary_dim is None:
        want = hf.gptj.apply_rotary_pos_emb(xt, sin, cos)
    else:
        want = torch.cat([hf.gptj.apply_rotary_pos_emb(xt[..., :r], sin, cos), xt[..., r:]], -1)
    got = posenc.apply_rope(
        x, position_ids[:, :, None], layout="interleaved", seq_axis=-3, rotary_dim=rotary_dim
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-14 * np.abs(x).max())


def test_gptj_sinusoidal_table_equals_rope_cos_sin(hf):
    # GPT-J's table (float32 phase) against rope_cos_sin: equal to float32 phase precision
    table = hf.gptj.create_sinusoidal_positions(2048, 64).numpy()
    sin, cos = table[:, :32], table[:, 32:]
    pc, ps = posenc.rope_cos_sin(2048, 64, layout="interleaved", dtype=np.float64)
    phase_err = 2048 * 2.0**-24 * 4  # |angle| * float32 relative error of the product
    np.testing.assert_allclose(cos, pc[:, ::2], rtol=0, atol=phase_err)
    np.testing.assert_allclose(sin, ps[:, ::2], rtol=0, atol=phase_err)


# ---------------------------------------------------------------- float32: the whole path


def _hf_float32_rope(hf, config, q, position_ids, module="llama"):
    """transformers' rotary path in float32: the rotary embedding module
    (float32 phase, dynamic/longrope updates) then apply_rotary_pos_emb."""
    torch = hf.torch
    if module == "llama":
        rotary, apply = hf.llama.LlamaRotaryEmbedding(config), hf.llama.apply_rotary_pos_emb
    else:
        rotary, apply = hf.neox.GPTNeoXRotaryEmbedding(config), hf.neox.apply_rotary_pos_emb
    qt = torch.from_numpy(q)
    cos, sin = rotary(qt, torch.from_numpy(position_ids))
    return apply(qt, qt, cos, sin)[0].numpy()


def _assert_within_float32_phase_error(got, want, exact, x, max_pos):
    """posenc's float32 result `got` is within 1e-6 (relative to max|x|) of
    the float64 NumPy reference `exact`, and differs from transformers'
    float32 result `want` by no more than transformers' float32 phase can:
    an angle below max_pos off by a few float32 roundings (of the position,
    the frequency and their product), on both terms of the rotation."""
    scale = np.abs(x).max()
    assert np.abs(got - exact).max() / scale <= 1e-6
    phase_err = max_pos * 2.0**-24 * 8
    assert np.abs(got - want).max() / scale <= 2 * 1.5 * phase_err + 1e-6


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("span", [(0, 2048), (30000, 34000)])
def test_float32_differs_from_transformers_within_its_float32_phase_error(hf, name, span):
    rng = np.random.default_rng(4)
    d = 128
    q = rng.standard_normal((2, 4, 64, d)).astype(np.float32)
    position_ids = np.sort(rng.integers(*span, (2, 64)), axis=-1)
    scaling = _scaling(name, d)
    config = _llama_config(hf, d, 500000.0, scaling)
    want = _hf_float32_rope(hf, config, q, position_ids)
    got = posenc.apply_rope(
        q, position_ids[:, None, :], base=500000.0, scaling=_posenc_scaling(scaling)
    )
    exact = reference.apply_rope(
        q.astype(np.float64),
        position_ids[:, None, :],
        base=500000.0,
        scaling=_posenc_scaling(scaling),
    )
    _assert_within_float32_phase_error(got, want, exact, q, span[1])


def test_float32_partial_rotary_gpt_neox_within_its_float32_phase_error(hf):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 64, 96)).astype(np.float32)
    position_ids = np.arange(10_000, 10_064)[None]
    config = hf.GPTNeoXConfig(
        hidden_size=384,
        num_attention_heads=4,
        max_position_embeddings=MAX_POS,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
    )
    want = _hf_float32_rope(hf, config, q, position_ids, module="neox")
    scaling = dict(config.rope_parameters)
    got = posenc.apply_rope(q, position_ids[:, None, :], scaling=scaling)
    exact = reference.apply_rope(q.astype(np.float64), position_ids[:, None, :], scaling=scaling)
    _assert_within_float32_phase_error(got, want, exact, q, 10_064)
    np.testing.assert_array_equal(got[..., 24:], q[..., 24:])
