"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"):
``apply_rope(..., xpos="query" | "key")`` and ``rope_cos_sin(..., xpos=...)``.

The witnesses are the formulas of the implementations users run, written
here in float64 NumPy from their definitions (none of them is a dependency):

- rotary-embedding-torch (``RotaryEmbedding(use_xpos=True)``,
  ``rotate_queries_and_keys``): interleaved pairs, ``scale = zeta **
  ((t - len(t) // 2) / xpos_scale_base)`` for the positions ``t`` of the
  call, queries times ``scale``, keys times ``scale ** -1``.
- torchscale's ``XPOS(head_dim, scale_base)``: interleaved pairs,
  positions ``0 .. length + offset - 1`` of which the last ``length`` are
  used, scale exponents ``arange(min_pos, max_pos) / scale_base`` with
  ``min_pos = -(length + offset) // 2``; ``downscale=True`` (keys) divides.
- flash-attn's ``RotaryEmbedding(scale_base=...)``: half layout, tables
  ``cos(t * inv_freq) * scale`` (queries) and ``cos / scale`` (keys) of
  shape ``(seqlen, rotary_dim / 2)``, ``scale = zeta ** ((t - seqlen // 2)
  / scale_base)``.
- a case worked by hand, and the property that makes xPos a relative
  encoding: the score of a query at m and a key at n depends on m - n only.
"""

import math

import numpy as np
import pytest

import posenc
from posenc import reference


def _zeta(r):
    return (np.arange(0, r, 2, dtype=np.float64) + 0.4 * r) / (1.4 * r)


def _inv_freq(r, base=10000.0):
    return 1.0 / base ** (np.arange(0, r, 2, dtype=np.float64) / r)


def _rotate_every_two(x):
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return out


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


# ---------------------------------------------------------------- the witnesses


def _rotary_embedding_torch(q, k, scale_base):
    """rotate_queries_and_keys of rotary-embedding-torch with use_xpos, for
    (batch, heads, seq, dim) q and k."""
    seq, d = q.shape[-2], q.shape[-1]
    t = np.arange(seq, dtype=np.float64)
    freqs = np.repeat(np.outer(t, _inv_freq(d)), 2, axis=-1)  # '... n -> ... (n r)'
    power = (t - seq // 2) / scale_base
    scale = np.repeat(_zeta(d)[None, :] ** power[:, None], 2, axis=-1)
    qe = q * np.cos(freqs) * scale + _rotate_every_two(q) * np.sin(freqs) * scale
    ke = k * np.cos(freqs) / scale + _rotate_every_two(k) * np.sin(freqs) / scale
    return qe, ke


def _torchscale_xpos(x, scale_base, offset=0, downscale=False):
    """torchscale's XPOS.forward(x, offset, downscale) for x of shape
    (batch * heads, length, head_dim)."""
    length, d = x.shape[1], x.shape[2]
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    scale = _zeta(d)[None, :] ** (np.arange(min_pos, max_pos)[:, None] / scale_base)
    # fixed_pos_embedding(scale): inv_freq over d/2 columns, positions 0..L-1
    half = d // 2
    inv = 1.0 / 10000 ** (np.arange(half) / half)
    angle = np.outer(np.arange(scale.shape[0], dtype=np.float64), inv)
    sin, cos = np.sin(angle), np.cos(angle)
    scale, sin, cos = scale[-length:], sin[-length:], cos[-length:]
    if downscale:
        scale = 1 / scale
    sin, cos = np.repeat(sin * scale, 2, axis=-1), np.repeat(cos * scale, 2, axis=-1)
    return x * cos + _rotate_every_two(x) * sin


def _flash_attn_tables(seqlen, rotary_dim, scale_base):
    """flash-attn's _update_cos_sin_cache with scale_base: (cos, sin, cos_k,
    sin_k), each (seqlen, rotary_dim / 2)."""
    t = np.arange(seqlen, dtype=np.float64)
    freqs = np.outer(t, _inv_freq(rotary_dim))
    power = (t - seqlen // 2) / scale_base
    scale = _zeta(rotary_dim)[None, :] ** power[:, None]
    return (
        np.cos(freqs) * scale,
        np.sin(freqs) * scale,
        np.cos(freqs) / scale,
        np.sin(freqs) / scale,
    )


def _flash_attn_apply(x, cos, sin):
    """flash-attn's apply_rotary_emb_torch, half layout, x (batch, seq,
    heads, dim) and half-width tables for the first 2 * cos.shape[-1] dims."""
    r = 2 * cos.shape[-1]
    c = np.concatenate([cos, cos], axis=-1)[:, None, :]
    s = np.concatenate([sin, sin], axis=-1)[:, None, :]
    xr = x[..., :r]
    return np.concatenate([xr * c + _rotate_half(xr) * s, x[..., r:]], axis=-1)


# ---------------------------------------------------------------- against them


@pytest.mark.parametrize("seq", [16, 33])
def test_rotary_embedding_torch_xpos(simd, seq):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, seq, 32))
    k = rng.standard_normal((2, 3, seq, 32))
    want_q, want_k = _rotary_embedding_torch(q, k, scale_base=64)
    kw = dict(layout="interleaved", xpos_scale_base=64, xpos_centre=seq // 2)
    got_q = posenc.apply_rope(q, xpos="query", **kw)
    got_k = posenc.apply_rope(k, xpos="key", **kw)
    np.testing.assert_allclose(got_q, want_q, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got_k, want_k, rtol=1e-13, atol=1e-13)
    # float32 against the float64 value: within a few float32 roundings
    got32 = posenc.apply_rope(q.astype(np.float32), xpos="query", **kw)
    want32 = _rotary_embedding_torch(q.astype(np.float32).astype(np.float64), k, 64)[0]
    np.testing.assert_allclose(got32, want32, rtol=0, atol=4 * 2.0**-24 * np.abs(want32).max())


@pytest.mark.parametrize("length,offset", [(20, 0), (7, 13), (1, 40), (10, 5)])
def test_torchscale_xpos(simd, length, offset):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, length, 24))
    centre = -(-(length + offset) // 2)  # torchscale's: -min_pos
    for role, downscale in (("query", False), ("key", True)):
        want = _torchscale_xpos(x, 512, offset=offset, downscale=downscale)
        got = posenc.apply_rope(
            x,
            layout="interleaved",
            offset=offset,
            xpos=role,
            xpos_scale_base=512,
            xpos_centre=centre,
        )
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("seqlen,rotary_dim,scale_base", [(100, 32, 512), (257, 48, 16)])
def test_flash_attn_xpos_tables_and_rotation(simd, seqlen, rotary_dim, scale_base):
    cos, sin, cos_k, sin_k = _flash_attn_tables(seqlen, rotary_dim, scale_base)
    kw = dict(full=False, xpos_scale_base=scale_base, xpos_centre=seqlen // 2, dtype="float64")
    got = posenc.rope_cos_sin(seqlen, rotary_dim, xpos="query", **kw)
    got_k = posenc.rope_cos_sin(seqlen, rotary_dim, xpos="key", **kw)
    for a, b in zip(got + got_k, (cos, sin, cos_k, sin_k)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    # the rotation of (batch, seq, heads, head_dim) data, partial rotary
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, seqlen, 3, rotary_dim + 8))
    for role, tables in (("query", (cos, sin)), ("key", (cos_k, sin_k))):
        want = _flash_attn_apply(x, *tables)
        y = posenc.apply_rope(
            x,
            rotary_dim=rotary_dim,
            seq_axis=-3,
            xpos=role,
            xpos_scale_base=scale_base,
            xpos_centre=seqlen // 2,
        )
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_a_case_worked_by_hand():
    # one pair (dim 2): zeta_0 = 0.4 * 2 / (1.4 * 2) = 2/7, inv_freq 1.
    # At position 3 with centre 1 and scale base 2 the factor is (2/7) ** 1.
    x = np.array([[1.0, 0.0]])
    kw = dict(xpos_scale_base=2.0, xpos_centre=1.0)
    q = posenc.apply_rope(x, [3.0], xpos="query", **kw)
    k = posenc.apply_rope(x, [3.0], xpos="key", **kw)
    np.testing.assert_allclose(q, [[2 / 7 * math.cos(3), 2 / 7 * math.sin(3)]], rtol=1e-15)
    np.testing.assert_allclose(k, [[7 / 2 * math.cos(3), 7 / 2 * math.sin(3)]], rtol=1e-15)
    # and the tables: cos 3 * 2/7 for the query, / (2/7) for the key
    cos, sin = posenc.rope_cos_sin([3.0], 2, dtype="float64", xpos="key", **kw)
    np.testing.assert_allclose(cos, [[3.5 * math.cos(3)] * 2], rtol=1e-15)
    np.testing.assert_allclose(sin, [[3.5 * math.sin(3)] * 2], rtol=1e-15)


# ---------------------------------------------------------------- the relative property


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_the_distance_whatever_the_centre(layout):
    rng = np.random.default_rng(3)
    d, n = 16, 40
    q0, k0 = rng.standard_normal(d), rng.standard_normal(d)
    pos = np.arange(n, dtype=np.float64)
    q = np.broadcast_to(q0, (n, d)).copy()
    k = np.broadcast_to(k0, (n, d)).copy()
    scores = {}
    for centre in (0.0, 17.0, -250.0):
        kw = dict(layout=layout, xpos_scale_base=32.0, xpos_centre=centre)
        qe = posenc.apply_rope(q, pos, xpos="query", **kw)
        ke = posenc.apply_rope(k, pos, xpos="key", **kw)
        s = qe @ ke.T  # s[m, n] for a query at m and a key at n
        for shift in (1, 5, 13):
            np.testing.assert_allclose(
                s[shift:, shift:], s[:-shift, :-shift], rtol=0, atol=1e-12 * np.abs(s).max()
            )
        scores[centre] = s
    tol = 1e-12 * np.abs(scores[0.0]).max()
    np.testing.assert_allclose(scores[17.0], scores[0.0], rtol=0, atol=tol)
    np.testing.assert_allclose(scores[-250.0], scores[0.0], rtol=0, atol=tol)
    # and the decay is xPos's: sum_i zeta_i ** ((m - n) / gamma) * (rotated dot)
    rq = posenc.apply_rope(q, pos, layout=layout)
    rk = posenc.apply_rope(k, pos, layout=layout)
    plain = rq @ rk.T
    assert not np.allclose(plain, scores[0.0])


def test_a_centre_taken_per_call_breaks_packed_batches_and_a_fixed_one_does_not():
    """flash-attn issue #522: centring on each sequence's (or the batch's)
    length makes a packed sequence's numbers depend on its neighbours.
    With one fixed centre and positions from the packed boundaries, the
    packed call equals the sequences rotated one by one."""
    rng = np.random.default_rng(4)
    cu = np.array([0, 5, 17, 20])
    x = rng.standard_normal((20, 2, 16))  # (total tokens, heads, dim)
    pos = posenc.positions_from_cu_seqlens(cu)
    kw = dict(xpos="query", xpos_scale_base=8.0, xpos_centre=4.0, seq_axis=-3)
    packed = posenc.apply_rope(x, pos, **kw)
    for a, b in zip(cu[:-1], cu[1:]):
        one = posenc.apply_rope(x[a:b], **kw)
        np.testing.assert_array_equal(packed[a:b], one)
    # a KV cache: keys of earlier steps and the query of the newest one
    # give the scores of the whole sequence
    q = rng.standard_normal((1, 30, 16))
    k = rng.standard_normal((1, 30, 16))
    kw = dict(xpos_scale_base=16.0, xpos_centre=10.0)
    full = posenc.apply_rope(q, xpos="query", **kw) @ posenc.apply_rope(k, xpos="key", **kw).mT
    keys = np.concatenate(
        [posenc.apply_rope(k[:, :20], xpos="key", **kw)]
        + [posenc.apply_rope(k[:, i : i + 1], xpos="key", offset=i, **kw) for i in range(20, 30)],
        axis=1,
    )
    last = posenc.apply_rope(q[:, 29:], xpos="query", offset=29, **kw) @ keys.mT
    np.testing.assert_allclose(last[0, 0], full[0, 29], rtol=1e-12)
    # centring each call on its own length (rotary-embedding-torch's
    # len(t) // 2) changes the decoding step's scores
    shifted = posenc.apply_rope(
        q[:, 29:], xpos="query", offset=29, xpos_scale_base=16.0, xpos_centre=0.0
    )
    assert not np.allclose(shifted @ keys.mT, last)


# ---------------------------------------------------------------- precision, paths, options


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float32_tables_within_one_ulp_at_long_positions(simd, ulp_distance, layout):
    # "the float64 value": NumPy's float64 cos and sin of the same float64
    # angles (pos * posenc's inv_freq), times NumPy's float64 zeta ** t
    pos = 2**24 + np.arange(-1000, 1000, 7, dtype=np.float64)
    scale_base, centre = 512.0, 2**24 - 300.0
    inv_freq, _ = posenc.rope_frequencies(64, base=500000.0)
    angle = pos[:, None] * inv_freq
    for role in ("query", "key"):
        power = (pos[:, None] - centre) / scale_base * (1 if role == "query" else -1)
        f = _zeta(64)[None, :] ** power
        want_cos, want_sin = np.cos(angle) * f, np.sin(angle) * f
        kw = dict(base=500000.0, xpos=role, xpos_scale_base=scale_base, xpos_centre=centre)
        cos, sin = posenc.rope_cos_sin(pos, 64, layout=layout, full=False, **kw)
        assert ulp_distance(cos, want_cos, np.float32).max() <= 1.0
        assert ulp_distance(sin, want_sin, np.float32).max() <= 1.0
        # apply_rope's tables: rotating the pair (1, 0) gives (cos, sin) exactly
        x = np.zeros((len(pos), 64), np.float32)
        a = slice(0, 32) if layout == "half" else slice(0, 64, 2)
        b = slice(32, 64) if layout == "half" else slice(1, 64, 2)
        x[:, a] = 1.0
        y = posenc.apply_rope(x, pos, layout=layout, **kw)
        assert ulp_distance(y[:, a], want_cos, np.float32).max() <= 1.0
        assert ulp_distance(y[:, b], want_sin, np.float32).max() <= 1.0


def test_xpos_against_the_numpy_twin_on_every_path(on_every_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 300, 40)).astype(np.float32)
    pos = np.arange(300) * 1.5 + 1000
    for layout in ("half", "interleaved", "interleaved_to_half"):
        for role in ("query", "key"):
            for inverse in (False, True):
                kw = dict(
                    layout=layout,
                    xpos=role,
                    inverse=inverse,
                    rotary_dim=32,
                    xpos_scale_base=256.0,
                    xpos_centre=1200.0,
                )
                results = on_every_path(lambda kw=kw: posenc.apply_rope(x, pos, **kw))
                for r in results[1:]:
                    np.testing.assert_array_equal(r, results[0])
                want = reference.apply_rope(x.astype(np.float64), pos, **kw)
                tol = 4 * 2.0**-24 * np.abs(want).max()
                np.testing.assert_allclose(results[0], want, rtol=0, atol=tol)


def test_the_factors_of_a_row_depend_on_its_anchor_group_only(simd, threads):
    """A float32 tile follows evenly spaced positions by multiplying by the
    step's factors from an exact value at the start of each group of 32
    positions along the axis: the rows of whole groups have the same bits
    whatever else is in the call (more positions, other heads, the layout
    of x)."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 300, 64)).astype(np.float32)
    kw = dict(xpos="query", xpos_scale_base=128.0, xpos_centre=100.0, offset=5)
    whole = posenc.apply_rope(x, **kw)
    np.testing.assert_array_equal(posenc.apply_rope(x[:, :, :288], **kw), whole[:, :, :288])
    np.testing.assert_array_equal(posenc.apply_rope(x[:1, 1:2], **kw), whole[:1, 1:2])
    xt = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # (batch, seq, heads, dim)
    np.testing.assert_array_equal(
        posenc.apply_rope(xt, seq_axis=-3, **kw).transpose(0, 2, 1, 3), whole
    )


def test_inverse_undoes_and_bfloat16_float16():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 50, 32))
    for role in ("query", "key"):
        kw = dict(xpos=role, xpos_scale_base=64.0, xpos_centre=25.0)
        y = posenc.apply_rope(x, **kw)
        np.testing.assert_allclose(posenc.apply_rope(y, inverse=True, **kw), x, atol=1e-13)
    for dtype in ("float16", "bfloat16"):
        if dtype == "bfloat16":
            dtype = pytest.importorskip("ml_dtypes").bfloat16
        xd = x.astype(dtype)
        got = posenc.apply_rope(xd, xpos="query", xpos_scale_base=64.0, xpos_centre=25.0)
        want = reference.apply_rope(
            xd.astype(np.float64), xpos="query", xpos_scale_base=64.0, xpos_centre=25.0
        )
        # one rounding to the 16-bit type of a float32 rotation
        eps = 2.0**-8 if dtype != "float16" else 2.0**-11
        err = np.abs(got.astype(np.float64) - want)
        assert (err <= eps * np.abs(want) + 1e-6 * np.abs(want).max()).all()


def test_out_and_in_place(simd):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 2, 40, 16)).astype(np.float32)
    want = posenc.apply_rope(x, xpos="key", xpos_centre=20.0)
    y = x.copy()
    assert posenc.apply_rope(y, xpos="key", xpos_centre=20.0, out=y) is y
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize(
    "kw,exc,match",
    [
        (dict(xpos="value"), ValueError, "xpos"),
        (dict(xpos=1), TypeError, "xpos"),
        (dict(xpos="query", xpos_scale_base=0.0), ValueError, "xpos_scale_base"),
        (dict(xpos="query", xpos_scale_base=-5.0), ValueError, "xpos_scale_base"),
        (dict(xpos="query", xpos_scale_base="512"), TypeError, "xpos_scale_base"),
        (dict(xpos="query", xpos_centre=np.nan), ValueError, "xpos_centre"),
        (dict(xpos="query", xpos_centre=None), TypeError, "xpos_centre"),
        # the factors leave float32's range: 1.25 * 2**20 / 8 > 88
        (dict(xpos="key", xpos_scale_base=8.0, offset=2**20), ValueError, "xpos"),
    ],
)
def test_bad_xpos_options(kw, exc, match):
    x = np.ones((1, 4, 8), np.float32)
    before = x.copy()
    with pytest.raises(exc, match=match):
        posenc.apply_rope(x, **kw)
    np.testing.assert_array_equal(x, before)
    kw.pop("offset", None)
    positions = [2**20] if kw.get("xpos_scale_base") == 8.0 else 4
    with pytest.raises(exc, match=match):
        posenc.rope_cos_sin(positions, 8, **kw)


def test_the_range_check_follows_the_dtype():
    # 1.2528 * 200 / 8 = 31: past float16's range (11.1), within float32's
    with pytest.raises(ValueError, match="float16"):
        posenc.rope_cos_sin([200], 8, xpos="query", xpos_scale_base=8.0, dtype="float16")
    cos, _ = posenc.rope_cos_sin([200], 8, xpos="query", xpos_scale_base=8.0)
    assert np.isfinite(cos).all()
    # apply_rope rotates float16 in float32: its factors may exceed float16's
    # range (zeta ** -t up to e**15.7 here), small data stay finite
    x = np.full((1, 8), 2**-20, np.float16)
    y = posenc.apply_rope(x, [100], xpos="key", xpos_scale_base=8.0)
    assert np.isfinite(y).all() and np.abs(y).max() > 1.0


# ---------------------------------------------------------------- tensors and arrays


def test_torch_autograd_and_compile():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 11, 16))
    g = rng.standard_normal(x.shape)
    eye = np.eye(16)
    for role in ("query", "key"):
        for inverse in (False, True):
            kw = dict(xpos=role, inverse=inverse, xpos_scale_base=4.0, xpos_centre=3.0)
            t = torch.tensor(x, requires_grad=True)
            y = posenc.apply_rope(t, **kw)
            np.testing.assert_array_equal(y.detach().numpy(), posenc.apply_rope(x, **kw))
            (y * torch.from_numpy(g)).sum().backward()
            # the transpose of the (per-row linear) map, from the NumPy twin
            cols = [reference.apply_rope(np.broadcast_to(e, x.shape).copy(), **kw) for e in eye]
            matrix = np.stack(cols, axis=-1)  # (..., out, in)
            want = np.einsum("...oi,...o->...i", matrix, g)
            np.testing.assert_allclose(t.grad.numpy(), want, rtol=0, atol=1e-12)

    def f(z, p):
        q = posenc.apply_rope(z, p, xpos="query", xpos_scale_base=64.0, xpos_centre=5.0)
        c, s = posenc.rope_cos_sin(p, 16, xpos="key", full=False, xpos_centre=5.0)
        return q, c, s

    z = torch.randn(2, 3, 11, 16)
    p = torch.arange(11)
    got = torch.compile(f, fullgraph=True)(z, p)
    want = f(z, p)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert tuple(got[1].shape) == (11, 8)


def test_jax_arrays_and_grad():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 9, 16)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    kw = dict(xpos="query", xpos_scale_base=8.0, xpos_centre=4.0)
    np.testing.assert_array_equal(
        np.asarray(posenc.apply_rope(jnp.asarray(x), **kw)), posenc.apply_rope(x, **kw)
    )
    grad = jax.grad(lambda z: (posenc.apply_rope(z, **kw) * g).sum())(jnp.asarray(x))
    # the transpose of a query's transform is the inverse of a key's
    back = dict(kw, xpos="key", inverse=True)
    want = reference.apply_rope(g.astype(np.float64), **back)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=0, atol=1e-5)
    jitted = jax.jit(lambda z: posenc.rope_cos_sin(z, 16, xpos="key", full=False))
    c, s = jitted(jnp.arange(7))
    np.testing.assert_array_equal(
        np.asarray(c), posenc.rope_cos_sin(np.arange(7), 16, xpos="key", full=False)[0]
    )


def test_bad_xpos_options_with_tensors_and_jax_arrays():
    torch = pytest.importorskip("torch")
    t = torch.ones(1, 4, 8)
    with pytest.raises(ValueError, match="xpos"):
        posenc.apply_rope(t, xpos="value")
    with pytest.raises(ValueError, match="xpos_scale_base"):
        posenc.apply_rope(t.requires_grad_(True), xpos="key", xpos_scale_base=0.0)
    with pytest.raises(TypeError, match="full"):
        posenc.rope_cos_sin(torch.arange(4), 8, full="no")
    with pytest.raises(ValueError, match="layout"):
        posenc.apply_rope(torch.ones(1, 4, 8), layout="interleaved_to_halves")
    jax = pytest.importorskip("jax")
    with pytest.raises(ValueError, match="xpos"):
        posenc.apply_rope(jax.numpy.ones((1, 4, 8)), xpos="value")
    with pytest.raises(ValueError, match="xpos_centre"):
        jax.jit(lambda z: posenc.apply_rope(z, xpos="query", xpos_centre=float("inf")))(
            jax.numpy.ones((1, 4, 8))
        )


def test_xpos_and_half_width_tables_with_positions_in_rows_are_refused():
    x = np.ones((1, 2, 5, 16), np.float32)
    rows = np.tile(np.arange(5), (3, 1, 1))
    before = x.copy()
    with pytest.raises(ValueError, match="xpos"):
        posenc.apply_rope(x, rows, mrope_section=[2, 3, 3], xpos="query", out=x)
    np.testing.assert_array_equal(x, before)
    with pytest.raises(ValueError, match="xpos"):
        posenc.apply_rope(x[0, 0], rows[:2, 0], axial=2, xpos="key")
    with pytest.raises(ValueError, match="full=True"):
        posenc.rope_cos_sin(rows, 16, mrope_section=[2, 3, 3], full=False)
    with pytest.raises(ValueError, match="xpos"):
        posenc.rope_cos_sin(rows[:2, 0], 16, axial=2, xpos="query")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deepseek_layout_with_positions_in_rows_is_the_twins(dtype):
    # the layout changes where pairs are read and written, the rows which
    # position each pair takes: the two compose
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 32)).astype(dtype)
    rows = rng.integers(0, 1000, (3, 2, 7))
    kw = dict(mrope_section=[4, 6, 6], layout="interleaved_to_half")
    got = posenc.apply_rope(x, rows, **kw)
    want = reference.apply_rope(x, rows, **kw)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(x).max())
    back = posenc.apply_rope(got, rows, inverse=True, **kw)
    np.testing.assert_allclose(back, x, rtol=0, atol=10 * tol * np.abs(x).max())
