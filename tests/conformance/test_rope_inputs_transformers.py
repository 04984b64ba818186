"""What posenc's RoPE accepts as input, against transformers' own modules.

- position ids as transformers passes them: `position_ids` of shape
  (batch, seq) with left padding, per-row offsets and packed rows, for
  (batch, heads, seq, head_dim) and (batch, seq, heads, head_dim), with GQA,
  against Llama's apply_rotary_pos_emb and GPT-J's gathered sinusoidal table
  and apply_rotary_pos_emb (interleaved, partial rotary);
- transformers config objects as `scaling` (and `layer_type` for configs with
  parameters per layer type), against each model's own rotary embedding
  module: its `inv_freq` buffer and `attention_scaling` after a forward pass
  on a fresh module (dynamic and longrope switch there), its cos/sin and its
  apply_rotary_pos_emb;
- the dialects transformers rewrites on load (Phi-3's "su" and "yarn" with
  short/long factors are LongRoPE, HunYuan's "dynamic" with `alpha` is
  NTK-alpha), given as config objects, as rope dicts and as config.json dicts;
- M-RoPE's `mrope_section` needs positions in three rows,
  a misspelt key warns and is ignored as transformers ignores it.

transformers forms the phase in float32 (`position_ids.float() * inv_freq`,
with `inv_freq` a float32 buffer).  The float64 witness used here is the
module's forward done in float64 from the module's own `inv_freq` (checked
against the module's float32 output); posenc's float64 result differs from it
by no more than the float32 rounding of `inv_freq` times the position.  Where
only the placement of positions is at stake, the frequencies are the textbook
base ** (-2i/d) in float64 (checked against Llama's buffer) and posenc must
agree to float64 precision.
"""

import contextlib
import math
import types

import numpy as np
import pytest

import posenc

# ---------------------------------------------------------------- tolerances


def _float32_rtol(base):
    """transformers forms `inv_freq` in float32: the exponent 2i/dim is
    rounded (a relative error of 2**-24 in the exponent becomes ln(base) *
    2**-24 in base**exponent), then a few more roundings."""
    return (8 + 2 * math.log(base)) * 2.0**-24


def _float64_atol(x, max_pos):
    """posenc in float64 against a float64 witness with the same formula: the
    angle pos * inv_freq agrees to a few ulp of the angle, on both terms."""
    return np.abs(x).max() * (1e-14 + 2 * (max_pos + 1) * 2.0**-49)


def _float32_phase_atol(x, max_pos):
    """posenc in float32 against transformers' whole float32 path: the
    difference is transformers' float32 phase error (an angle below max_pos off
    by a few float32 roundings), on both terms of the rotation (as in
    test_rope_transformers)."""
    phase_err = max_pos * 2.0**-24 * 8
    return np.abs(x).max() * (2 * 1.5 * phase_err + 1e-6)


def _assert_within(got, want, atol):
    """|got - want| <= atol elementwise (atol broadcast, e.g. per column)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    excess = err - atol
    assert np.all(excess <= 0), f"max error {err.max():.3g}, worst excess {excess.max():.3g}"


# ---------------------------------------------------------------- witnesses


@contextlib.contextmanager
def _default_dtype(torch, dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _heads_config(config_class, head_dim, heads, **kwargs):
    """config_class's config of `heads` attention heads of head_dim each."""
    return config_class(
        hidden_size=heads * head_dim, num_attention_heads=heads, head_dim=head_dim, **kwargs
    )


def _llama_config(hf, head_dim, heads=32, kv_heads=8, **kwargs):
    return _heads_config(hf.LlamaConfig, head_dim, heads, num_key_value_heads=kv_heads, **kwargs)


def _default_inv_freq64(hf, config):
    """The textbook base ** (-2i/d) in float64, checked against the float32
    `inv_freq` buffer of transformers' LlamaRotaryEmbedding for `config`."""
    base = config.rope_parameters["rope_theta"]
    d = config.head_dim
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    module = hf.llama.LlamaRotaryEmbedding(config).inv_freq.double().numpy()
    np.testing.assert_allclose(module, inv, rtol=_float32_rtol(base), atol=0)
    return inv


def _cos_sin64(torch, inv_freq, position_ids, attention=1.0):
    """cos, sin as the models' rotary embedding modules form them (freqs =
    position_ids[..., None] * inv_freq; emb = cat(freqs, freqs)), in float64."""
    freqs = np.asarray(position_ids, np.float64)[..., None] * inv_freq
    emb = np.concatenate([freqs, freqs], -1)
    return torch.from_numpy(np.cos(emb) * attention), torch.from_numpy(np.sin(emb) * attention)


def _module_witness(hf, rotary, position_ids, layer_type=None):
    """Run a (fresh) rotary embedding module on `position_ids` as the model
    does (dynamic and longrope update their `inv_freq` there), and return its
    `inv_freq` (float64 copy of the float32 buffer), `attention_scaling`, and
    its cos/sin recomputed in float64 from them, checked against the module's
    float32 cos/sin to its float32 phase error."""
    torch = hf.torch
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    prefix = "" if layer_type is None else f"{layer_type}_"
    cos32, sin32 = rotary(torch.zeros(1), torch.from_numpy(position_ids), **kwargs)
    inv_freq = getattr(rotary, f"{prefix}inv_freq").double().numpy()
    attention = float(getattr(rotary, f"{prefix}attention_scaling"))
    cos, sin = (t.numpy() for t in _cos_sin64(torch, inv_freq, position_ids, attention))
    angle = np.abs(position_ids[..., None].astype(np.float64) * np.concatenate([inv_freq] * 2))
    tol = attention * (angle * 2.0**-23 + 2.0**-21)
    _assert_within(cos32.double().numpy(), cos, tol)
    _assert_within(sin32.double().numpy(), sin, tol)
    return types.SimpleNamespace(inv_freq=inv_freq, attention=attention, cos=cos, sin=sin)


def _phase_atol(witness, position_ids, rtol):
    """Per column of cos/sin: the float32 rounding of the witness' inv_freq
    (relative rtol) times the largest position, plus float64 noise."""
    inv = np.concatenate([witness.inv_freq] * 2)
    return witness.attention * float(np.max(position_ids)) * inv * rtol + 1e-13


# ---------------------------------------------------------------- position ids


def _assert_reads_as_module(scaling, head_dim, span, ids, witness, rtol):
    """posenc's inv_freq (to `rtol`), attention factor (exactly) and float64
    cos/sin of position ids `ids` below `span`, read from `scaling`, against
    the rotary module's witness."""
    inv_freq, attention = posenc.rope_frequencies(head_dim, scaling=scaling, seq_len=span)
    np.testing.assert_allclose(inv_freq, witness.inv_freq, rtol=rtol, atol=0)
    assert attention == witness.attention
    cos, sin = posenc.rope_cos_sin(ids, head_dim, scaling=scaling, dtype="float64")
    atol = _phase_atol(witness, ids, rtol)
    _assert_within(cos, witness.cos, atol)
    _assert_within(sin, witness.sin, atol)


def _padded_ids(seq, pads):
    """transformers' position ids for left-padded rows: cumsum(mask) - 1,
    clipped at 0 (the pad tokens at position 0)."""
    mask = np.ones((len(pads), seq), np.int64)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return np.clip(np.cumsum(mask, -1) - 1, 0, None)


def _batch_position_ids(seq, offsets):
    """Rows with 0, 3 and 7 pad tokens and a packed row restarting at 0,
    each shifted by its offset (a KV cache of that many tokens)."""
    ids = np.concatenate(
        [_padded_ids(seq, [0, 3, 7]), np.concatenate([np.arange(9), np.arange(seq - 9)])[None]]
    )
    return ids + np.asarray(offsets)[:, None]


OFFSETS = {"no-offset": (0, 0, 0, 0), "per-row-offsets": (0, 17, 2000, 301)}


@pytest.mark.parametrize("offsets", list(OFFSETS))
@pytest.mark.parametrize("head_dim", [128, 64])
@pytest.mark.parametrize("seq_axis", [-2, -3])
def test_batch_position_ids_equal_llama_rotation_in_float64(hf, seq_axis, head_dim, offsets):
    """(batch, seq) ids used as they are; q with 32 heads, k with 8 (GQA)."""
    torch = hf.torch
    rng = np.random.default_rng(10)
    b, s = 4, 16
    ids = _batch_position_ids(s, OFFSETS[offsets])
    inv_freq = _default_inv_freq64(hf, _llama_config(hf, head_dim))
    cos, sin = _cos_sin64(torch, inv_freq, ids)
    q = rng.standard_normal((b, 32, s, head_dim))
    k = rng.standard_normal((b, 8, s, head_dim))
    if seq_axis == -3:
        q, k = q.transpose(0, 2, 1, 3).copy(), k.transpose(0, 2, 1, 3).copy()
    unsqueeze = 1 if seq_axis == -2 else 2
    q_hf, k_hf = hf.llama.apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(k), cos, sin, unsqueeze_dim=unsqueeze
    )
    for x, want in [(q, q_hf.numpy()), (k, k_hf.numpy())]:
        got = posenc.apply_rope(x, ids, seq_axis=seq_axis)
        _assert_within(got, want, _float64_atol(x, ids.max()))


@pytest.mark.parametrize("offsets", list(OFFSETS))
@pytest.mark.parametrize("head_dim", [128, 64])
@pytest.mark.parametrize("seq_axis", [-2, -3])
def test_batch_position_ids_float32_equal_llama_whole_path(hf, seq_axis, head_dim, offsets):
    """float32 input: within transformers' float32 phase error of its whole
    float32 path (LlamaRotaryEmbedding, then apply_rotary_pos_emb), and
    within float32 rounding of its rotation done in float64."""
    torch = hf.torch
    rng = np.random.default_rng(11)
    b, s = 4, 16
    ids = _batch_position_ids(s, OFFSETS[offsets])
    config = _llama_config(hf, head_dim)
    q = rng.standard_normal((b, 32, s, head_dim)).astype(np.float32)
    k = rng.standard_normal((b, 8, s, head_dim)).astype(np.float32)
    if seq_axis == -3:
        q, k = q.transpose(0, 2, 1, 3).copy(), k.transpose(0, 2, 1, 3).copy()
    unsqueeze = 1 if seq_axis == -2 else 2
    qt, kt = torch.from_numpy(q), torch.from_numpy(k)
    cos32, sin32 = hf.llama.LlamaRotaryEmbedding(config)(qt, torch.from_numpy(ids))
    assert cos32.dtype == torch.float32
    want32 = hf.llama.apply_rotary_pos_emb(qt, kt, cos32, sin32, unsqueeze_dim=unsqueeze)
    cos, sin = _cos_sin64(torch, _default_inv_freq64(hf, config), ids)
    want64 = hf.llama.apply_rotary_pos_emb(
        qt.double(), kt.double(), cos, sin, unsqueeze_dim=unsqueeze
    )
    for x, w32, w64 in [(q, want32[0], want64[0]), (k, want32[1], want64[1])]:
        got = posenc.apply_rope(x, ids, seq_axis=seq_axis)
        assert got.dtype == np.float32
        _assert_within(got, w32.numpy(), _float32_phase_atol(x, ids.max()))
        _assert_within(got, w64.numpy(), 1e-6 * np.abs(x).max())


def test_batch_ids_are_not_broadcast_along_heads_when_batch_equals_heads(hf):
    """Regression: x (8, 8, 16, 128) with (8, 16) ids.  Broadcasting the ids
    against x.shape[:-1] put their batch axis on the heads (max error 9.0)."""
    torch = hf.torch
    rng = np.random.default_rng(12)
    x = rng.standard_normal((8, 8, 16, 128))
    ids = np.arange(16) + 37 * np.arange(8)[:, None]
    cos, sin = _cos_sin64(torch, _default_inv_freq64(hf, _llama_config(hf, 128)), ids)
    xt = torch.from_numpy(x)
    want = hf.llama.apply_rotary_pos_emb(xt, xt, cos, sin)[0].numpy()
    # the reading that puts the ids' batch axis on the heads is far off
    wrong = hf.llama.apply_rotary_pos_emb(xt, xt, cos, sin, unsqueeze_dim=0)[0].numpy()
    assert np.abs(wrong - want).max() > 1.0
    got = posenc.apply_rope(x, ids)
    _assert_within(got, want, _float64_atol(x, ids.max()))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_seq_positions_rotate_along_seq_axis_when_seq_equals_heads(hf, layout):
    """(batch, seq, heads, head_dim) with seq == heads and (seq,) positions:
    with seq_axis=-3 the positions run along seq, not along heads."""
    torch = hf.torch
    rng = np.random.default_rng(13)
    b, s, h, d = 2, 8, 8, 64
    x = rng.standard_normal((b, s, h, d))
    positions = np.array([5, 0, 9, 100, 3, 42, 7, 1])
    xt = torch.from_numpy(x)
    if layout == "half":
        inv_freq = _default_inv_freq64(hf, _llama_config(hf, d))
        cos, sin = _cos_sin64(torch, inv_freq, positions[None])
        want = hf.llama.apply_rotary_pos_emb(xt, xt, cos, sin, unsqueeze_dim=2)[0].numpy()
    else:
        want = _gptj_rotate(hf, x, np.broadcast_to(positions, (b, s)), d)
    got = posenc.apply_rope(x, positions, seq_axis=-3, layout=layout)
    _assert_within(got, want, _float64_atol(x, positions.max()))


@pytest.mark.parametrize(
    "ids_shape", [(3, 15), (2, 16), (3, 16, 1, 1)], ids=["seq-15", "batch-2", "too-many-dims"]
)
@pytest.mark.parametrize("seq_axis", [-2, -3])
def test_position_ids_that_cannot_be_placed_raise(seq_axis, ids_shape):
    x = np.zeros((3, 8, 16, 64) if seq_axis == -2 else (3, 16, 8, 64))
    with pytest.raises(ValueError, match="expected"):
        posenc.apply_rope(x, np.zeros(ids_shape, np.int64), seq_axis=seq_axis)


# ---------------------------------------------------------------- GPT-J (interleaved)


def _gptj_rotate(hf, x, position_ids, rotary_dim):
    """GPT-J's rotary path on x (batch, seq, heads, head_dim), as GPTJAttention
    runs it: its sinusoidal table (create_sinusoidal_positions, built in the
    dtype of x: torch's default dtype sets the dtype of its frequencies),
    repeated per batch and gathered by position_ids, split into sin and cos,
    apply_rotary_pos_emb on the first rotary_dim features, the rest passed."""
    torch = hf.torch
    xt = torch.from_numpy(x)
    with _default_dtype(torch, xt.dtype):
        table = hf.gptj.create_sinusoidal_positions(int(position_ids.max()) + 1, rotary_dim)
    assert table.dtype == xt.dtype
    ids = torch.from_numpy(np.ascontiguousarray(position_ids))
    embed_positions = table.repeat(ids.shape[0], 1, 1)
    repeated_position_ids = ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
    sincos = torch.gather(embed_positions, 1, repeated_position_ids).to(xt.dtype)
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    rot = hf.gptj.apply_rotary_pos_emb(xt[..., :rotary_dim], sin, cos)
    return torch.cat([rot, xt[..., rotary_dim:]], dim=-1).numpy()


GPTJ_SHAPES = {"gptj-64-of-256": (256, 64), "16-of-32": (32, 16), "full-64": (64, 64)}


@pytest.mark.parametrize("shape", list(GPTJ_SHAPES))
def test_interleaved_batch_position_ids_equal_gptj_in_float64(hf, shape):
    head_dim, rotary_dim = GPTJ_SHAPES[shape]
    rng = np.random.default_rng(14)
    b, s, h = 4, 16, 2
    x = rng.standard_normal((b, s, h, head_dim))
    ids = _batch_position_ids(s, OFFSETS["per-row-offsets"])
    want = _gptj_rotate(hf, x, ids, rotary_dim)
    got = posenc.apply_rope(x, ids, layout="interleaved", seq_axis=-3, rotary_dim=rotary_dim)
    _assert_within(got, want, _float64_atol(x, ids.max()))
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


@pytest.mark.parametrize("shape", list(GPTJ_SHAPES))
def test_interleaved_batch_position_ids_float32_equal_gptj_whole_path(hf, shape):
    head_dim, rotary_dim = GPTJ_SHAPES[shape]
    rng = np.random.default_rng(15)
    b, s, h = 4, 16, 2
    x = rng.standard_normal((b, s, h, head_dim)).astype(np.float32)
    ids = _batch_position_ids(s, OFFSETS["per-row-offsets"])
    want = _gptj_rotate(hf, x, ids, rotary_dim)
    got = posenc.apply_rope(x, ids, layout="interleaved", seq_axis=-3, rotary_dim=rotary_dim)
    assert got.dtype == np.float32
    _assert_within(got, want, _float32_phase_atol(x, ids.max()))


# ---------------------------------------------------------------- config objects


def _factors(n, seed, high):
    rng = np.random.default_rng(seed)
    return [float(v) for v in 1 + rng.uniform(0, high, n)]


def _phi3_config(hf, hidden_size=256, heads=4, partial=None, rope=None, **kwargs):
    """A small Phi-3 config with LongRoPE: trained on 4096, extended to 131072."""
    rotary = int(hidden_size // heads * (partial or 1.0))
    if rope is None:
        rope = {
            "rope_type": "longrope",
            "short_factor": _factors(rotary // 2, 1, 0.2),
            "long_factor": _factors(rotary // 2, 2, 8.0),
        }
    extra = {} if partial is None else {"partial_rotary_factor": partial}
    return hf.Phi3Config(
        hidden_size=hidden_size,
        num_attention_heads=heads,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_parameters=rope,
        **extra,
        **kwargs,
    )


def _gemma3_config(hf):
    return _heads_config(
        hf.Gemma3TextConfig,
        64,
        heads=2,
        num_key_value_heads=1,
        num_hidden_layers=6,  # five sliding layers, then a full one
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
    )


HUNYUAN_ROPE = {  # the keys of HunYuan's released config.json rope_scaling
    "alpha": 1000.0,
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "type": "dynamic",
}


def _hunyuan_config(hf):
    return _heads_config(
        hf.HunYuanDenseV1Config,
        128,
        heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rope_scaling=dict(HUNYUAN_ROPE),
    )


def _llama(head_dim, spans=(3000,), **kwargs):
    """A CONFIGS entry of a Llama config with these keys."""
    return (lambda hf: _llama_config(hf, head_dim, **kwargs), "llama", None, spans)


# name: (config builder, rotary module and apply_rotary_pos_emb's module, layer_type, spans)
# A span n gives position ids whose largest is n - 1 (transformers' seq_len n).
CONFIGS = {
    "llama-default": (
        lambda hf: hf.LlamaConfig(hidden_size=256, num_attention_heads=4),  # head_dim 64
        "llama",
        None,
        (64, 3000),
    ),
    "llama-linear": _llama(
        128, rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0}
    ),
    "llama-linear-legacy-rope_scaling": _llama(
        64, rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=123456.0
    ),
    "llama-dynamic": _llama(
        64,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
        spans=(100, 256, 257, 700),
    ),
    "llama-yarn": _llama(
        128,
        max_position_embeddings=8192,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 2048,
            "rope_theta": 500000.0,
        },
    ),
    "llama-yarn-trained-length-from-max_position_embeddings": _llama(
        64,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0},
    ),
    "llama-yarn-deepseek-mscale": _llama(
        64,
        max_position_embeddings=163840,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
            "rope_theta": 10000.0,
        },
    ),
    "llama3": _llama(
        128,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    ),
    "phi3-longrope": (lambda hf: _phi3_config(hf), "phi3", None, (100, 4096, 4097, 6000)),
    "phi3-longrope-partial": (
        lambda hf: _phi3_config(hf, heads=2, partial=0.5),  # head_dim 128, rotary 64
        "phi3",
        None,
        (4096, 6000),
    ),
    "gpt-neox-default-rotary_pct": (  # transformers' default partial_rotary_factor 0.25
        lambda hf: hf.GPTNeoXConfig(hidden_size=256, num_attention_heads=2),
        "neox",
        None,
        (3000,),
    ),
    "gpt-neox-rotary_pct-rotary_emb_base": (
        lambda hf: hf.GPTNeoXConfig(
            hidden_size=256, num_attention_heads=2, rotary_pct=0.5, rotary_emb_base=20000
        ),
        "neox",
        None,
        (3000,),
    ),
    "gemma3-full_attention": (_gemma3_config, "gemma3", "full_attention", (3000,)),
    "gemma3-sliding_attention": (_gemma3_config, "gemma3", "sliding_attention", (3000,)),
    "hunyuan-ntk-alpha": (_hunyuan_config, "hunyuan", None, (100, 3000)),
}

ROTARY_CLASSES = {
    "llama": "LlamaRotaryEmbedding",
    "phi3": "Phi3RotaryEmbedding",
    "neox": "GPTNeoXRotaryEmbedding",
    "gemma3": "Gemma3RotaryEmbedding",
    "hunyuan": "HunYuanDenseV1RotaryEmbedding",
}

CONFIG_CASES = [(name, span) for name, case in CONFIGS.items() for span in case[3]]


def _head_dim(config):
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _theta(config, layer_type):
    params = config.rope_parameters
    return (params if layer_type is None else params[layer_type])["rope_theta"]


def _span_ids(span, seed):
    """(2, 24) position ids below `span`, the largest span - 1; the second
    row left-padded."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.integers(0, span, (2, 24)), axis=-1)
    ids[0, -1] = span - 1
    ids[1, :5] = 0
    return ids


def _config_case(hf, name, span):
    build, model, layer_type, _ = CONFIGS[name]
    config = build(hf)
    module = getattr(hf, model)
    rotary = getattr(module, ROTARY_CLASSES[model])(build(hf))  # fresh, on its own config
    ids = _span_ids(span, seed=span)
    witness = _module_witness(hf, rotary, ids, layer_type)
    return config, module, layer_type, ids, witness


def _layer_kwargs(layer_type):
    return {} if layer_type is None else {"layer_type": layer_type}


@pytest.mark.parametrize("name,span", CONFIG_CASES)
def test_rope_frequencies_of_config_equal_rotary_module(hf, name, span):
    """inv_freq against the module's buffer after its forward on positions
    below `span` (transformers' seq_len), attention factor exactly."""
    config, _, layer_type, ids, witness = _config_case(hf, name, span)
    inv_freq, attention = posenc.rope_frequencies(
        _head_dim(config), scaling=config, seq_len=span, **_layer_kwargs(layer_type)
    )
    assert inv_freq.shape == witness.inv_freq.shape
    rtol = _float32_rtol(_theta(config, layer_type))
    np.testing.assert_allclose(inv_freq, witness.inv_freq, rtol=rtol, atol=0)
    assert attention == witness.attention


@pytest.mark.parametrize("name,span", CONFIG_CASES)
def test_rope_cos_sin_of_config_equal_rotary_module(hf, name, span):
    """cos/sin from position ids (seq_len = max + 1 as transformers takes
    it) against the module's, recomputed in float64 from its inv_freq."""
    config, _, layer_type, ids, witness = _config_case(hf, name, span)
    cos, sin = posenc.rope_cos_sin(
        ids, _head_dim(config), scaling=config, dtype="float64", **_layer_kwargs(layer_type)
    )
    atol = _phase_atol(witness, ids, _float32_rtol(_theta(config, layer_type)))
    _assert_within(cos, witness.cos, atol)
    _assert_within(sin, witness.sin, atol)


@pytest.mark.parametrize("name,span", CONFIG_CASES)
def test_apply_rope_with_config_equals_model_apply_rotary_pos_emb(hf, name, span):
    """apply_rope(x, position_ids, scaling=config) against the model's own
    apply_rotary_pos_emb (partial rotary for Phi-3 and GPT-NeoX) on cos/sin of
    its rotary module, in float64."""
    config, module, layer_type, ids, witness = _config_case(hf, name, span)
    torch = hf.torch
    rng = np.random.default_rng(16)
    d = _head_dim(config)
    x = rng.standard_normal((2, 3, ids.shape[1], d))
    xt = torch.from_numpy(x)
    cos, sin = torch.from_numpy(witness.cos), torch.from_numpy(witness.sin)
    want = module.apply_rotary_pos_emb(xt, xt, cos, sin)[0].numpy()
    got = posenc.apply_rope(x, ids, scaling=config, **_layer_kwargs(layer_type))
    r = witness.cos.shape[-1]
    phase = _phase_atol(witness, ids, _float32_rtol(_theta(config, layer_type)))
    atol = 2 * np.abs(x).max() * np.concatenate([phase, np.zeros(d - r)])
    _assert_within(got, want, atol + _float64_atol(x, ids.max()))
    np.testing.assert_array_equal(got[..., r:], x[..., r:])


def test_gemma3_config_without_layer_type_raises_naming_the_layer_types(hf):
    config = _gemma3_config(hf)
    for call in (
        lambda: posenc.rope_frequencies(64, scaling=config),
        lambda: posenc.rope_cos_sin(16, 64, scaling=config),
        lambda: posenc.apply_rope(np.zeros((1, 2, 16, 64)), scaling=config),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert "full_attention" in str(info.value)
        assert "sliding_attention" in str(info.value)


def test_gemma3_layer_types_differ_in_transformers(hf):
    """The two layer types are told apart for a reason: their frequencies differ."""
    rotary = hf.gemma3.Gemma3RotaryEmbedding(_gemma3_config(hf))
    full = rotary.full_attention_inv_freq.double().numpy()
    sliding = rotary.sliding_attention_inv_freq.double().numpy()
    assert np.max(sliding / full) > 2.0
    got_full, _ = posenc.rope_frequencies(
        64, scaling=_gemma3_config(hf), layer_type="full_attention"
    )
    got_sliding, _ = posenc.rope_frequencies(
        64, scaling=_gemma3_config(hf), layer_type="sliding_attention"
    )
    np.testing.assert_allclose(got_full, full, rtol=_float32_rtol(1e6), atol=0)
    np.testing.assert_allclose(got_sliding, sliding, rtol=_float32_rtol(1e4), atol=0)


# ---------------------------------------------------------------- dialects rewritten on load


PHI3_THETA = 250000.0


def _phi3_legacy_rope(kind):
    rope = {
        "type": kind,
        "short_factor": _factors(32, 3, 0.2),
        "long_factor": _factors(32, 4, 8.0),
    }
    if kind == "su":
        # transformers 5.23 moves the config's original_max_position_embeddings
        # into rope_parameters for "yarn" but not for "su": without it in the
        # dict, Phi3Config raises KeyError
        rope["original_max_position_embeddings"] = 4096
    return rope


def _phi3_legacy_forms(kind):
    """The legacy rope dict three ways: to Phi3Config, as a bare dict with the
    values transformers reads from the config, as a config.json dict."""
    bare = dict(
        _phi3_legacy_rope(kind),
        original_max_position_embeddings=4096,
        max_position_embeddings=131072,
        rope_theta=PHI3_THETA,
    )
    config_json = {
        "model_type": "phi3",
        "rope_scaling": _phi3_legacy_rope(kind),
        "rope_theta": PHI3_THETA,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "hidden_size": 256,
        "num_attention_heads": 4,
    }
    return {"rope-dict": bare, "config-json": config_json}


def _phi3_legacy_config(hf, kind):
    return hf.Phi3Config(
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_theta=PHI3_THETA,
        rope_scaling=_phi3_legacy_rope(kind),
    )


@pytest.mark.parametrize("span", [100, 4096, 4097, 6000])
@pytest.mark.parametrize("form", ["config", "rope-dict", "config-json"])
@pytest.mark.parametrize("kind", ["su", "yarn"])
def test_phi3_legacy_su_and_yarn_are_longrope_as_phi3_reads_them(hf, kind, form, span):
    """Phi-3's legacy {"type": "su" | "yarn", short_factor, long_factor} is
    LongRoPE: Phi3Config rewrites it, and Phi3RotaryEmbedding's numbers are
    LongRoPE's (read as YaRN, "yarn" was off by 12.6x in inv_freq)."""
    config = _phi3_legacy_config(hf, kind)
    assert config.rope_parameters["rope_type"] == "longrope"  # transformers' rewrite
    assert config.rope_parameters["type"] == kind  # kept beside it
    rotary = hf.phi3.Phi3RotaryEmbedding(_phi3_legacy_config(hf, kind))
    ids = _span_ids(span, seed=span + 1)
    witness = _module_witness(hf, rotary, ids)
    scaling = config if form == "config" else _phi3_legacy_forms(kind)[form]
    _assert_reads_as_module(scaling, 64, span, ids, witness, _float32_rtol(PHI3_THETA))


@pytest.mark.parametrize("span", [100, 3000])
@pytest.mark.parametrize("form", ["config", "rope-dict", "config-json"])
def test_hunyuan_dynamic_with_alpha_is_ntk_alpha_as_hunyuan_reads_it(hf, form, span):
    """HunYuan's {"type": "dynamic", "alpha": 1000, ...}: transformers'
    HunYuanDenseV1RotaryEmbedding uses base * alpha ** (d / (d - 2)), fixed
    whatever the length (alpha ignored was off by up to 1000x)."""
    config = _hunyuan_config(hf)
    rotary = hf.hunyuan.HunYuanDenseV1RotaryEmbedding(_hunyuan_config(hf))
    assert rotary.rope_type == "ntk_alpha"  # transformers' own reading of the dict
    ids = _span_ids(span, seed=span + 2)
    witness = _module_witness(hf, rotary, ids)
    # transformers' inv_freq is the hand-derived one: base * alpha ** (d / (d - 2))
    base = 10000.0 * 1000.0 ** (128 / 126)
    np.testing.assert_allclose(
        witness.inv_freq, base ** (-np.arange(0, 128, 2) / 128), rtol=_float32_rtol(base)
    )
    scaling = {
        "config": config,
        "rope-dict": dict(HUNYUAN_ROPE, rope_theta=10000.0, max_position_embeddings=2048),
        "config-json": {
            "model_type": "hunyuan_v1_dense",
            "rope_scaling": dict(HUNYUAN_ROPE),
            "rope_theta": 10000.0,
            "max_position_embeddings": 2048,
            "hidden_size": 256,
            "num_attention_heads": 2,
            "head_dim": 128,
        },
    }[form]
    _assert_reads_as_module(scaling, 128, span, ids, witness, _float32_rtol(base))


# ---------------------------------------------------------------- refusals


MROPE = {"type": "mrope", "mrope_section": [8, 12, 12]}


def _qwen2_vl_text_config(hf):
    return hf.Qwen2VLTextConfig(
        hidden_size=128, num_attention_heads=2, num_key_value_heads=1, rope_scaling=dict(MROPE)
    )


@pytest.mark.parametrize("form", ["config", "rope-dict", "raw-rope-dict", "config-json"])
def test_mrope_section_needs_positions_in_three_rows(hf, form):
    config = _qwen2_vl_text_config(hf)
    # transformers keeps the sections (and calls the rope "default"): M-RoPE
    # splits the frequencies among temporal/height/width position ids
    assert config.rope_parameters["mrope_section"] == [8, 12, 12]
    assert hf.qwen2_vl.Qwen2VLRotaryEmbedding(config).mrope_section == [8, 12, 12]
    scaling = {
        "config": config,
        "rope-dict": dict(config.rope_parameters),  # as transformers rewrote it
        "raw-rope-dict": dict(MROPE, rope_theta=1e6),  # as Qwen2-VL's config.json has it
        "config-json": {
            "model_type": "qwen2_vl",
            "rope_scaling": dict(MROPE),
            "rope_theta": 1e6,
            "hidden_size": 128,
            "num_attention_heads": 2,
        },
    }[form]
    # the frequencies are the default ones (transformers' inv_freq)
    inv_freq, _ = posenc.rope_frequencies(64, scaling=scaling)
    want = hf.qwen2_vl.Qwen2VLRotaryEmbedding(config).inv_freq.double().numpy()
    np.testing.assert_allclose(inv_freq, want, rtol=4e-7)
    # ordinary positions: refused, naming the sections
    for call in (
        lambda: posenc.rope_cos_sin(16, 64, scaling=scaling),
        lambda: posenc.apply_rope(np.zeros((1, 2, 16, 64)), scaling=scaling),
        lambda: posenc.apply_rope(np.zeros((1, 2, 16, 64)), np.arange(16), scaling=scaling),
    ):
        with pytest.raises(ValueError, match="mrope_section"):
            call()
    # three rows of positions: M-RoPE (see test_rope_multimodal_transformers.py)
    ids = np.stack([np.arange(16), np.arange(16) // 4, np.arange(16) % 4])[:, None]
    cos, _ = posenc.rope_cos_sin(ids, 64, scaling=scaling, dtype="float64")
    angles = np.concatenate(
        [ids[0, ..., None] * inv_freq[:8], ids[1, ..., None] * inv_freq[8:20]]
        + [ids[2, ..., None] * inv_freq[20:]],
        axis=-1,
    )
    np.testing.assert_allclose(cos, np.cos(np.concatenate([angles, angles], -1)), atol=1e-15)


def test_misspelt_key_warns_and_is_ignored_as_transformers_ignores_it(hf):
    rope = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 2048,
        "rope_theta": 500000.0,
    }
    misspelt = dict(rope, beta_fst=8)  # meant beta_fast
    rotary = hf.llama.LlamaRotaryEmbedding(
        _llama_config(hf, 128, max_position_embeddings=8192, rope_parameters=dict(misspelt))
    )
    clean = hf.llama.LlamaRotaryEmbedding(
        _llama_config(hf, 128, max_position_embeddings=8192, rope_parameters=dict(rope))
    )
    assert hf.torch.equal(rotary.inv_freq, clean.inv_freq)  # transformers ignores it
    ids = _span_ids(3000, seed=5)
    witness = _module_witness(hf, rotary, ids)
    scaling = dict(misspelt, max_position_embeddings=8192)
    with pytest.warns(Warning, match="beta_fst"):
        inv_freq, attention = posenc.rope_frequencies(128, scaling=scaling)
    np.testing.assert_allclose(inv_freq, witness.inv_freq, rtol=_float32_rtol(5e5), atol=0)
    assert attention == witness.attention
    with pytest.warns(Warning, match="beta_fst"):
        cos, _ = posenc.rope_cos_sin(ids, 128, scaling=scaling, dtype="float64")
    _assert_within(cos, witness.cos, _phase_atol(witness, ids, _float32_rtol(5e5)))
