"""The layouts around RoPE, against transformers' own code.

- DeepSeek-V3's interleaved-in, half-out rotation: ``apply_rope(...,
  layout="interleaved_to_half")`` against transformers'
  ``modeling_deepseek_v3.apply_rotary_pos_emb_interleave`` with the cos/sin
  of ``DeepseekV3RotaryEmbedding``, for a ``DeepseekV3Config`` whose
  ``rope_interleave`` flag is set (its default), read as transformers reads it.
- Half-width cos/sin tables (``rope_cos_sin(..., full=False)``, flash-attn's
  ``(seq, rotary_dim / 2)`` convention): the first half of the full table of
  transformers' ``LlamaRotaryEmbedding``.
"""

import numpy as np
import pytest

import posenc
from posenc import reference

YARN = {
    "rope_type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "rope_theta": 10000.0,
}


def _deepseek_config(hf, rope_head_dim=16, rope_parameters=None):
    return hf.DeepseekV3Config(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        qk_rope_head_dim=rope_head_dim,
        qk_nope_head_dim=16,
        v_head_dim=16,
        q_lora_rank=32,
        kv_lora_rank=32,
        max_position_embeddings=4096,
        rope_parameters=dict(rope_parameters or YARN),
    )


def _deepseek_rotation(hf, config, q, k, position_ids, tables="transformers"):
    """transformers' DeepSeek-V3 rotation of q and k (float64 tensors) by
    apply_rotary_pos_emb_interleave, with the cos/sin of its
    DeepseekV3RotaryEmbedding (which forms the frequencies and the phase in
    float32), or, with tables="float64", with the float64 tables of the NumPy
    twin (half layout, attention factor applied, as the module gives them)."""
    torch = hf.torch
    pos = torch.as_tensor(position_ids)
    if tables == "transformers":
        rotary = hf.deepseek.DeepseekV3RotaryEmbedding(config)
        cos, sin = (t.to(torch.float64) for t in rotary(torch.as_tensor(q), pos))
    else:
        cos, sin = reference.rope_cos_sin(
            np.asarray(position_ids),
            config.qk_rope_head_dim,
            scaling=config.rope_parameters,
            dtype="float64",
        )
        cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
    qe, ke = hf.deepseek.apply_rotary_pos_emb_interleave(
        torch.as_tensor(q), torch.as_tensor(k), cos, sin
    )
    return qe.numpy(), ke.numpy()


@pytest.mark.parametrize("rope_parameters", [None, {"rope_type": "default", "rope_theta": 1e4}])
def test_deepseek_v3_rotation_equals_transformers(hf, simd, rope_parameters):
    config = _deepseek_config(hf, rope_parameters=rope_parameters)
    assert config.rope_interleave  # the flag under which the model takes this path
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 37, 16))
    k = rng.standard_normal((2, 1, 37, 16))
    position_ids = np.stack([np.arange(37), np.arange(37) + 3])
    got_q = posenc.apply_rope(q, position_ids, scaling=config, layout="interleaved_to_half")
    got_k = posenc.apply_rope(k, position_ids, scaling=config, layout="interleaved_to_half")
    # transformers' whole path: its float32 phase at positions < 40
    want_q, want_k = _deepseek_rotation(hf, config, q, k, position_ids)
    np.testing.assert_allclose(got_q, want_q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got_k, want_k, rtol=0, atol=1e-5)
    # its rotation with float64 tables: to 1e-12
    want_q, want_k = _deepseek_rotation(hf, config, q, k, position_ids, tables="float64")
    np.testing.assert_allclose(got_q, want_q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got_k, want_k, rtol=0, atol=1e-12)
    # float32 against the float64 value: the rotation's rounding, no more
    q32 = q.astype(np.float32)
    got32 = posenc.apply_rope(q32, position_ids, scaling=config, layout="interleaved_to_half")
    want = _deepseek_rotation(hf, config, q32.astype(np.float64), k, position_ids, "float64")[0]
    np.testing.assert_allclose(got32, want, rtol=0, atol=4 * 2.0**-24 * np.abs(want).max())


@pytest.mark.parametrize("rope_interleave", [True, False])
def test_the_rope_interleave_flag_read_from_the_config(hf, rope_interleave):
    """DeepseekV3Attention rotates with apply_rotary_pos_emb_interleave when
    config.rope_interleave is set and with apply_rotary_pos_emb otherwise:
    the flag, read from the config, picks posenc's layout."""
    config = _deepseek_config(hf)
    config.rope_interleave = rope_interleave
    torch = hf.torch
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, 4, 21, 16))
    pos = np.arange(21)[None] + 50
    cos, sin = reference.rope_cos_sin(pos, 16, scaling=config.rope_parameters, dtype="float64")
    cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
    qt = torch.from_numpy(q)
    if config.rope_interleave:
        want = hf.deepseek.apply_rotary_pos_emb_interleave(qt, qt, cos, sin)[0].numpy()
    else:
        want = hf.deepseek.apply_rotary_pos_emb(qt, qt, cos, sin)[0].numpy()
    layout = "interleaved_to_half" if config.rope_interleave else "half"
    got = posenc.apply_rope(q, pos, scaling=config, layout=layout)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_deepseek_v3_rotation_at_its_real_shape(hf, simd):
    """qk_rope_head_dim = 64 (DeepSeek-V3's), 128 heads of queries, one key,
    at positions near 4000."""
    config = _deepseek_config(hf, rope_head_dim=64)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 128, 24, 64))
    k = rng.standard_normal((1, 1, 24, 64))
    position_ids = np.arange(4000, 4024)[None]
    want_q, want_k = _deepseek_rotation(hf, config, q, k, position_ids, tables="float64")
    for x, want in ((q, want_q), (k, want_k)):
        got = posenc.apply_rope(x, position_ids, scaling=config, layout="interleaved_to_half")
        # float64 phases 4000 * inv_freq: the twin's and posenc's frequencies
        # may differ in their last bit, 4000 * 2**-53 radians
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * 4000 / 100)
        # the (batch, seq, heads, dim) layout of the same data
        xt = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
        got_t = posenc.apply_rope(
            xt, position_ids, scaling=config, layout="interleaved_to_half", seq_axis=-3
        )
        np.testing.assert_array_equal(got_t.transpose(0, 2, 1, 3), got)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
@pytest.mark.parametrize("rotary_dim", [None, 24, 40])
def test_deepseek_layout_is_the_half_rotation_of_the_gathered_pairs(simd, dtype, rotary_dim):
    """Bit for bit: gathering the even then the odd features of the rotary
    part and rotating in the half layout is what the layout does (both SIMD
    paths; rows long enough for the vector loops and their tails)."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, 70, 48)).astype(dtype)
    r = rotary_dim or 48
    gathered = np.concatenate([x[..., 0:r:2], x[..., 1:r:2], x[..., r:]], axis=-1)
    want = posenc.apply_rope(gathered, rotary_dim=rotary_dim, base=500.0)
    got = posenc.apply_rope(x, rotary_dim=rotary_dim, base=500.0, layout="interleaved_to_half")
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # its inverse reads the half layout and scatters back: exactly the
    # inverse half rotation with the pairs put back in place
    back = posenc.apply_rope(
        got, rotary_dim=rotary_dim, base=500.0, layout="interleaved_to_half", inverse=True
    )
    half_back = posenc.apply_rope(got, rotary_dim=rotary_dim, base=500.0, inverse=True)
    scattered = half_back.copy()
    scattered[..., 0:r:2], scattered[..., 1:r:2] = (
        half_back[..., : r // 2],
        half_back[..., r // 2 : r],
    )
    np.testing.assert_array_equal(back.view(np.uint8), scattered.view(np.uint8))


def test_deepseek_layout_against_the_numpy_twin(on_every_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 45, 64))
    pos = rng.integers(0, 100000, size=(2, 45))
    for inverse in (False, True):
        want = reference.apply_rope(x, pos, layout="interleaved_to_half", inverse=inverse)
        results = on_every_path(
            lambda inverse=inverse: posenc.apply_rope(
                x, pos, layout="interleaved_to_half", inverse=inverse
            )
        )
        for got in results:
            np.testing.assert_array_equal(got, results[0])  # paths and threads agree
        # float64 phases up to 1e5 * inv_freq: a last-bit difference of the
        # frequencies is 1e5 * 2**-53 radians
        np.testing.assert_allclose(results[0], want, rtol=0, atol=1e-10)


def test_deepseek_layout_in_place_and_into_overlapping_out(simd):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 33, 32)).astype(np.float32)
    want = posenc.apply_rope(x, layout="interleaved_to_half")
    y = x.copy()
    assert posenc.apply_rope(y, layout="interleaved_to_half", out=y) is y
    np.testing.assert_array_equal(y, want)
    # out overlapping x as another view
    buf = np.concatenate([x.reshape(-1), np.zeros(32, np.float32)])
    src = buf[32:].reshape(x.shape)  # not x: shifted by one row
    src[...] = x
    out = buf[:-32].reshape(x.shape)
    posenc.apply_rope(src, layout="interleaved_to_half", out=out)
    np.testing.assert_array_equal(out, want)


def test_deepseek_layout_with_tensors_autograd_and_compile(hf):
    torch = hf.torch
    config = _deepseek_config(hf)
    rng = np.random.default_rng(5)
    q = torch.tensor(rng.standard_normal((2, 4, 19, 16)), requires_grad=True)
    pos = torch.arange(19)[None].expand(2, 19) + 7
    y = posenc.apply_rope(q, pos, scaling=config, layout="interleaved_to_half")
    qn = q.detach().numpy()
    want, _ = _deepseek_rotation(hf, config, qn, qn, pos.numpy(), tables="float64")
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=0, atol=1e-12)
    # the gradient is torch's own autograd through transformers' formula
    g = torch.tensor(rng.standard_normal(y.shape))
    (y * g).sum().backward()
    q2 = q.detach().clone().requires_grad_(True)
    cos, sin = reference.rope_cos_sin(
        pos.numpy(), 16, scaling=config.rope_parameters, dtype="float64"
    )
    cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
    qe, _ = hf.deepseek.apply_rotary_pos_emb_interleave(q2, q2, cos, sin)
    (qe * g).sum().backward()
    np.testing.assert_allclose(q.grad.numpy(), q2.grad.numpy(), rtol=0, atol=1e-12)

    def f(x):
        return posenc.apply_rope(x, pos, scaling=config, layout="interleaved_to_half")

    compiled = torch.compile(f, fullgraph=True)
    x = torch.tensor(rng.standard_normal((2, 4, 19, 16)), dtype=torch.float32)
    torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)


def test_deepseek_layout_with_jax_arrays_and_grad():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 9, 16)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    got = posenc.apply_rope(jnp.asarray(x), layout="interleaved_to_half")
    np.testing.assert_array_equal(
        np.asarray(got), posenc.apply_rope(x, layout="interleaved_to_half")
    )
    grad = jax.grad(lambda z: (posenc.apply_rope(z, layout="interleaved_to_half") * g).sum())(
        jnp.asarray(x)
    )
    # the transpose of the rotation: the inverse (float64 twin)
    want = reference.apply_rope(g.astype(np.float64), layout="interleaved_to_half", inverse=True)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=0, atol=1e-5)


def test_deepseek_layout_bad_input():
    with pytest.raises(ValueError, match="layout"):
        posenc.apply_rope(np.ones((2, 8)), layout="interleave_to_half")
    with pytest.raises(ValueError, match="layout"):
        posenc.rope_cos_sin(4, 8, layout="interleaved_to_half")  # tables are half or interleaved


# ---------------------------------------------------------------- half-width tables


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_half_width_tables_are_the_first_half_of_transformers_full_ones(hf, dtype):
    torch = hf.torch
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    config = hf.LlamaConfig(
        hidden_size=128,
        num_attention_heads=2,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        },
    )
    rotary = hf.llama.LlamaRotaryEmbedding(config).to(torch.float64)
    pos = np.arange(0, 40)[None]  # where transformers' float32 phase is within 4e-6
    x = torch.zeros(1, 1, dtype=torch.float64)
    cos, sin = (t.numpy()[0] for t in rotary(x, torch.as_tensor(pos)))
    got_cos, got_sin = posenc.rope_cos_sin(pos[0], 64, scaling=config, full=False, dtype=dtype)
    assert got_cos.shape == (pos.shape[1], 32)
    full_cos, full_sin = posenc.rope_cos_sin(pos[0], 64, scaling=config, dtype=dtype)
    np.testing.assert_array_equal(got_cos, full_cos[:, :32])
    np.testing.assert_array_equal(got_sin, full_sin[:, :32])
    # transformers forms the frequencies and phases in float32
    tol = {"float64": 4e-6, "float32": 4e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    np.testing.assert_allclose(got_cos.astype(np.float64), cos[:, :32], rtol=0, atol=tol)
    np.testing.assert_allclose(got_sin.astype(np.float64), sin[:, :32], rtol=0, atol=tol)


def test_half_width_tables_follow_flash_attns_convention(simd):
    """flash-attn's RotaryEmbedding caches cos(outer(t, inv_freq)) of shape
    (seqlen, rotary_dim / 2) (no duplication), inv_freq = base **
    (-arange(0, dim, 2) / dim): that formula in float64 NumPy."""
    dim, base = 96, 10000.0
    t = np.arange(5000, dtype=np.float64)
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    want_cos, want_sin = np.cos(np.outer(t, inv_freq)), np.sin(np.outer(t, inv_freq))
    cos, sin = posenc.rope_cos_sin(5000, dim, full=False, dtype="float64")
    np.testing.assert_allclose(cos, want_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin, want_sin, rtol=0, atol=1e-12)
    c32, s32 = posenc.rope_cos_sin(5000, dim, full=False)
    # float32: within 1 ulp of the float64 value
    for got, want in ((c32, want_cos), (s32, want_sin)):
        ulp = np.spacing(np.abs(want).astype(np.float32))
        assert (np.abs(got.astype(np.float64) - want) <= ulp).all()
    twin = reference.rope_cos_sin(5000, dim, full=False, dtype="float64")
    np.testing.assert_allclose(cos, twin[0], rtol=0, atol=1e-12)


def test_half_width_tables_with_tensors_and_compile(hf):
    torch = hf.torch
    pos = torch.arange(50)
    cos, sin = posenc.rope_cos_sin(pos, 32, full=False)
    assert isinstance(cos, torch.Tensor) and tuple(cos.shape) == (50, 16)
    want = posenc.rope_cos_sin(np.arange(50), 32, full=False)
    np.testing.assert_array_equal(cos.numpy(), want[0])

    def f(p):
        return posenc.rope_cos_sin(p, 32, full=False, dtype=torch.float64)

    c, s = torch.compile(f, fullgraph=True)(pos)
    assert tuple(c.shape) == (50, 16) and c.dtype == torch.float64
    np.testing.assert_array_equal(
        s.numpy(), posenc.rope_cos_sin(np.arange(50), 32, full=False, dtype="float64")[1]
    )


def test_half_width_tables_bad_input():
    with pytest.raises(TypeError, match="full"):
        posenc.rope_cos_sin(4, 8, full="no")
    with pytest.raises(TypeError, match="full"):
        posenc.rope_cos_sin(4, 8, full=None)


def _module_tables(hf, module, config, dim, positions, seed):
    """Random float32 queries (1, 2, len(positions), dim), as an array and a
    tensor, their position ids, and the cos and sin of the modeling file's
    rotary module built from `config`."""
    torch = hf.torch
    rotary = next(c for n, c in vars(module).items() if n.endswith("RotaryEmbedding"))(config)
    x = np.random.default_rng(seed).standard_normal((1, 2, len(positions), dim))
    x = x.astype(np.float32)
    xt, ids = torch.from_numpy(x), positions[None]
    with torch.no_grad():
        cos, sin = rotary(xt, torch.from_numpy(ids))
    return x, xt, ids, cos, sin


@pytest.mark.parametrize("package", ["cohere", "glm4", "helium", "ernie4_5"])
def test_a_config_of_a_model_that_turns_interleaved_pairs_needs_that_layout(hf, package):
    """Cohere's, GLM-4's, Helium's and Ernie 4.5's attention turn (x[2i],
    x[2i+1]): apply_rope with their config and the default half layout was
    off by up to 6.5 and is refused; layout="interleaved" is the model's own
    rotation (its rotary module's float32 cos and sin, its
    apply_rotary_pos_emb)."""
    import importlib

    import transformers

    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    config_class = {
        "cohere": transformers.CohereConfig,
        "glm4": transformers.Glm4Config,
        "helium": transformers.HeliumConfig,
        "ernie4_5": transformers.Ernie4_5Config,
    }[package]
    config = config_class(hidden_size=256, num_attention_heads=4, num_key_value_heads=4)
    head_dim = getattr(config, "head_dim", None) or 64
    x, xt, ids, cos, sin = _module_tables(hf, module, config, head_dim, np.arange(30), 12)
    want = module.apply_rotary_pos_emb(xt, xt, cos, sin)[0].numpy()
    with pytest.raises(ValueError, match="pass layout='interleaved'"):
        posenc.apply_rope(x, ids, scaling=config)
    got = posenc.apply_rope(x, ids, scaling=config, layout="interleaved")
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(x).max())
    # a bare rope dict does not say which model it is: the caller's layout
    posenc.apply_rope(x, ids, scaling=dict(config.rope_parameters))
    # DeepSeek-V3 with rope_interleave: its own rotation, named
    deepseek = _deepseek_config(hf)
    deepseek.rope_interleave = True
    with pytest.raises(ValueError, match="pass layout='interleaved_to_half'"):
        posenc.apply_rope(np.zeros((1, 2, 3, 16)), np.arange(3)[None], scaling=deepseek)


@pytest.mark.parametrize(
    "package, config_name",
    [
        ("deepseek_v32", "DeepseekV32Config"),
        ("glm_moe_dsa", "GlmMoeDsaConfig"),
        ("longcat_flash", "LongcatFlashConfig"),
        ("bailing_hybrid", "BailingHybridConfig"),
    ],
)
def test_models_whose_attention_always_turns_pairs_as_deepseeks_flag_does(hf, package, config_name):
    """DeepSeek-V3.2's, GLM-MoE-DSA's, LongCat-Flash's and Bailing-Hybrid's attention
    call apply_rotary_pos_emb_interleave with no rope_interleave flag in their
    config: apply_rope with their config and the default half layout was off
    by up to 5.7 and is refused, naming "interleaved_to_half", which is the
    model's own rotation; DeepSeek-V3.2's indexer turns halves, which is the
    rope dict's rotation."""
    import importlib

    import transformers

    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    config = getattr(transformers, config_name)()
    dim = config.qk_rope_head_dim
    x, xt, ids, cos, sin = _module_tables(hf, module, config, dim, np.arange(1000, 1040), 13)
    want = module.apply_rotary_pos_emb_interleave(xt, xt, cos, sin)[0].numpy()
    with pytest.raises(ValueError, match="pass layout='interleaved_to_half'"):
        posenc.apply_rope(x, ids, scaling=config)
    got = posenc.apply_rope(x, ids, scaling=config, layout="interleaved_to_half")
    # float32 phases near 1000
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(x).max())
    assert np.abs(posenc.apply_rope(x, ids, scaling=dict(config.rope_parameters)) - want).max() > 1
    if hasattr(module, "apply_rotary_pos_emb"):  # DeepSeek-V3.2's indexer
        indexer = module.apply_rotary_pos_emb(xt, xt, cos, sin)[0].numpy()
        got = posenc.apply_rope(x, ids, scaling=dict(config.rope_parameters))
        np.testing.assert_allclose(got, indexer, rtol=0, atol=2e-4 * np.abs(x).max())


def test_deepseek_v4_rotates_the_last_channels_and_its_config_is_refused(hf):
    """DeepSeek-V4 turns the last qk_rope_head_dim channels of each 512-wide
    head, in interleaved pairs: its config (partial_rotary_factor 0.125) had
    posenc turn the first 64 in halves, silently; it is refused, and the
    rotation its error names (x[..., -64:], base=rope_theta,
    layout="interleaved") is the model's, for both of its layer types."""
    import transformers
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as module

    config = transformers.DeepseekV4Config()
    rotary = module.DeepseekV4RotaryEmbedding(config)
    torch = hf.torch
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 2, 40, config.head_dim)).astype(np.float32)
    ids = np.arange(40)[None]
    xt = torch.from_numpy(x)
    rd = config.qk_rope_head_dim
    for layer_type in ("main", "compress"):
        cos, sin = rotary(xt, torch.from_numpy(ids), layer_type=layer_type)
        want = module.apply_rotary_pos_emb(xt, cos, sin).numpy()
        with pytest.raises(ValueError, match=r"x\[\.\.\., -qk_rope_head_dim:\]"):
            posenc.apply_rope(x, ids, scaling=config, layer_type=layer_type)
        got = x.copy()
        base = config.rope_parameters[layer_type]["rope_theta"]
        got[..., -rd:] = posenc.apply_rope(x[..., -rd:], ids, base=base, layout="interleaved")
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(x).max())
        # its tables are posenc's (each frequency once, as full=False gives them)
        # (the module's phases below 40 are float32 products: 2e-6 apart)
        c, s = posenc.rope_cos_sin(ids, rd, base=base, full=False)
        np.testing.assert_allclose(c, cos.numpy(), rtol=0, atol=4e-6)
        np.testing.assert_allclose(s, sin.numpy(), rtol=0, atol=4e-6)


# -- the layout of x by name (axes=) -------------------------------------------------


def test_bshd_named_rotates_along_seq_when_heads_equal_seq(hf):
    # flash-attn's (batch, seq, heads, dim) with heads == seq: positions of
    # shape (batch, seq) fit the default seq_axis=-2 (the heads) as well, so
    # only the named layout says which axis is the sequence
    torch = hf.torch
    config = hf.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64)
    rotary = hf.llama.LlamaRotaryEmbedding(config)
    batch, seq, heads, dim = 2, 5, 5, 16
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, seq, dim, generator=g)  # transformers' bhsd
    k = torch.randn(batch, heads, seq, dim, generator=g)
    ids = torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 13, 30]])
    cos, sin = rotary(q, ids)
    want_q, want_k = hf.llama.apply_rotary_pos_emb(q, k, cos, sin)
    q_bshd, k_bshd = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()
    got_q = posenc.apply_rope(q_bshd, ids, scaling=config, axes="bshd").transpose(1, 2)
    got_k = posenc.apply_rope(k_bshd, ids, scaling=config, axes="bshd").transpose(1, 2)
    # transformers' float32 phases at positions below 32: within 2e-6
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=2e-5)
    torch.testing.assert_close(got_k, want_k, rtol=0, atol=2e-5)
    # the same through seq_axis, and the default reading is the heads axis
    same = posenc.apply_rope(q_bshd, ids, scaling=config, seq_axis=-3, axes="bshd")
    assert torch.equal(same, got_q.transpose(1, 2))
    along_heads = posenc.apply_rope(q_bshd, ids, scaling=config).transpose(1, 2)
    assert (along_heads - want_q).abs().max() > 0.1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"axes": "bhsd", "seq_axis": -3}, "seq_axis=-3 disagrees with axes='bhsd'"),
        ({"axes": "bshd", "seq_axis": 2}, "seq_axis=2 disagrees with axes='bshd'"),
        ({"axes": "bsd"}, "axes 'bsd' names 3 axes, x has 4"),
        ({"axes": "bhds"}, "axes must name x's axes"),
        ({"axes": "bbsd"}, "axes must name x's axes"),
        ({"axes": "bhxd"}, "axes must name x's axes"),
    ],
)
def test_axes_refused_by_name(kwargs, match):
    x = np.zeros((2, 3, 3, 8), np.float32)
    with pytest.raises(ValueError, match=match):
        posenc.apply_rope(x, **kwargs)
    with pytest.raises(TypeError, match="axes must be a string"):
        posenc.apply_rope(x, axes=["b", "s", "h", "d"])


@pytest.mark.parametrize("axes, seq_axis", [("bhsd", 2), ("bshd", 1), ("sd", 0), ("shd", 0)])
def test_axes_set_the_seq_axis(axes, seq_axis):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5, 8)[4 - len(axes) :]).astype(np.float32)
    want = posenc.apply_rope(x, seq_axis=seq_axis, offset=3)
    np.testing.assert_array_equal(posenc.apply_rope(x, axes=axes, offset=3), want)
    # positions placed by the named axis: one position per entry of that axis
    n = x.shape[seq_axis]
    pos = np.arange(n) * 2.0
    np.testing.assert_array_equal(
        posenc.apply_rope(x, pos, axes=axes), posenc.apply_rope(x, pos, seq_axis=seq_axis)
    )
