"""Complex-order embeddings (Wang et al. 2020): against the float64 twin, the
authors' module written in torch, a hand-derived case; the gradients of the
three tables against torch.autograd; bad input refused.  With torch tensors
and JAX arrays, the gradients of the tables and of float positions: torch's
gradcheck, torch.autograd and JAX's autodiff of the authors' formula written
as torch and jax.numpy ops, torch.compile, jax.jit and jax.vmap; the pair and
the complex result."""

import math
from functools import partial

import numpy as np
import pytest
from optional import require

from posenc import _reference_newer as reference
from posenc.complex_order import complex_order_embedding, complex_order_embedding_grad


def _tables(vocab=7, dim=4, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(vocab, dim)).astype(dtype)
    w = rng.normal(size=(vocab, dim)).astype(dtype)
    theta = rng.uniform(0, 2 * math.pi, size=(vocab, dim)).astype(dtype)
    return r, w, theta


def _ids(shape, vocab=7, seed=1):
    return np.random.default_rng(seed).integers(0, vocab, size=shape)


# --- forward -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (2, 6), (2, 3, 4), ()])
def test_complex_order_matches_float64_reference(shape):
    r, w, theta = _tables()
    ids = _ids(shape)
    pos = np.arange(1, ids.shape[-1] + 1) if ids.ndim else np.array(3.0)
    real, imag = complex_order_embedding(ids, pos, r, w, theta)
    want = reference.complex_order_embedding(ids, pos, r, w, theta)
    assert real.shape == imag.shape == ids.shape + (4,) and real.dtype == np.float64
    np.testing.assert_allclose(real, want.real, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(imag, want.imag, rtol=1e-14, atol=1e-15)


def test_complex_order_as_complex():
    r, w, theta = _tables()
    ids = _ids((2, 5))
    pos = np.arange(5)
    got = complex_order_embedding(ids, pos, r, w, theta, as_complex=True)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(
        got, reference.complex_order_embedding(ids, pos, r, w, theta), atol=1e-15
    )
    got32 = complex_order_embedding(
        ids, pos, *(t.astype(np.float32) for t in (r, w, theta)), as_complex=True
    )
    assert got32.dtype == np.complex64


def test_complex_order_hand_derived():
    # r = 2, w = pi / 2, theta = 0 at position 1: 2 * exp(i pi / 2) = 2i;
    # theta = pi at position 0: 2 * exp(i pi) = -2.
    r = np.array([[2.0, 2.0]])
    w = np.array([[math.pi / 2, 0.0]])
    theta = np.array([[0.0, math.pi]])
    real, imag = complex_order_embedding([0], [1], r, w, theta)
    np.testing.assert_allclose(real, [[0.0, -2.0]], atol=1e-15)
    np.testing.assert_allclose(imag, [[2.0, 0.0]], atol=1e-15)


def test_complex_order_shift_turns_each_feature_by_w_times_k():
    # The paper's relative-order property: f(t, pos + k) = f(t, pos) * exp(i w[t] k).
    r, w, theta = _tables(seed=2)
    ids = _ids((6,), seed=3)
    pos = np.arange(6.0)
    a = complex_order_embedding(ids, pos, r, w, theta, as_complex=True)
    b = complex_order_embedding(ids, pos + 5, r, w, theta, as_complex=True)
    np.testing.assert_allclose(b, a * np.exp(1j * w[ids] * 5), atol=1e-13)


def test_complex_order_float32_rounds_once_at_long_positions():
    r, w, theta = _tables(dtype=np.float32, seed=4)
    ids = _ids((4,), seed=5)
    pos = np.array([1.0, 1e5, 3e6, 2**24])
    real, imag = complex_order_embedding(ids, pos, r, w, theta)
    want = reference.complex_order_embedding(ids, pos, r, w, theta)
    assert real.dtype == np.float32
    # rounded once from float64: within one float32 ulp of the twin's float64 value
    np.testing.assert_array_max_ulp(real, want.real.astype(np.float32), maxulp=1)
    np.testing.assert_array_max_ulp(imag, want.imag.astype(np.float32), maxulp=1)
    # a float32 phase (w * pos in float32) would be off by far more at 2**24
    phi32 = pos.astype(np.float32) * w[ids] + theta[ids]
    assert np.abs(r[ids] * np.cos(phi32) - want.real).max() > 100 * np.abs(real - want.real).max()


# The positions and tables of the same-bits test: dim 13 (the AVX2 path's
# four at a time and its tail), positions long enough for the reduction's
# every step, one past 2**50 / |w| (the C library's branch), and enough
# tokens (2 * 1300 * 13 parts) for a second thread.
def _same_bits_case(dtype):
    rng = np.random.default_rng(11)
    r, w, theta = _tables(vocab=40, dim=13, seed=12, dtype=dtype)
    w = (w * 10).astype(dtype)
    ids = rng.integers(0, 40, size=(2, 650))
    pos = rng.integers(0, 2**20, size=(2, 650)).astype(np.float64)
    pos[0, :3] = [0.0, 2.0**45, -(2.0**46)]
    return ids, pos, r, w, theta


@pytest.mark.parametrize("as_complex", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, "mixed"])
def test_complex_order_every_simd_path_gives_the_same_bits(on_every_path, dtype, as_complex):
    ids, pos, r, w, theta = _same_bits_case(np.float32 if dtype == "mixed" else dtype)
    if dtype == "mixed":  # the rows the tokens use converted first
        r, theta = r.astype(np.float16), theta.astype(np.float64)
    results = on_every_path(
        lambda: complex_order_embedding(ids, pos, r, w, theta, as_complex=as_complex)
    )
    first = np.stack(results[0]) if not as_complex else results[0]
    for got in results[1:]:
        got = np.stack(got) if not as_complex else got
        np.testing.assert_array_equal(got.view(np.uint8), first.view(np.uint8))
    # and they are posenc's sine and cosine, close to the float64 twin's
    want = reference.complex_order_embedding(ids, pos, r, w, theta)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(first[0] if not as_complex else first.real, want.real, atol=tol)


@pytest.mark.parametrize("as_complex", [False, True])
def test_complex_order_long_positions_within_one_ulp(as_complex):
    # positions up to 2**20, |w| up to 10: the phase reaches 10**7; the parts
    # against np.cos and np.sin of the same float64 phase (r, w, theta in
    # float32, their values exact in float64), each rounded once
    rng = np.random.default_rng(13)
    r, w, theta = (
        rng.uniform(-2, 2, size=(50, 37)).astype(np.float32),
        rng.uniform(-10, 10, size=(50, 37)).astype(np.float32),
        rng.uniform(-4, 4, size=(50, 37)).astype(np.float32),
    )
    ids = rng.integers(0, 50, size=(3, 40))
    pos = rng.integers(0, 2**20 + 1, size=(3, 40))
    pos[0, 0] = 2**20
    phi = pos[..., None].astype(np.float64) * w[ids].astype(np.float64) + theta[ids]
    amp = r[ids].astype(np.float64)
    want_re, want_im = amp * np.cos(phi), amp * np.sin(phi)
    got = complex_order_embedding(ids, pos, r, w, theta, as_complex=as_complex)
    real, imag = (got.real, got.imag) if as_complex else got
    assert real.dtype == np.float32
    np.testing.assert_array_max_ulp(real, want_re.astype(np.float32), maxulp=1)
    np.testing.assert_array_max_ulp(imag, want_im.astype(np.float32), maxulp=1)
    # float64 parts: within a few float64 ulp of the same values
    got64 = complex_order_embedding(
        ids, pos, *(t.astype(np.float64) for t in (r, w, theta)), as_complex=as_complex
    )
    real, imag = (got64.real, got64.imag) if as_complex else got64
    np.testing.assert_array_max_ulp(real, want_re, maxulp=4)
    np.testing.assert_array_max_ulp(imag, want_im, maxulp=4)


def test_complex_order_matches_the_authors_module_in_torch():
    torch = require("torch")
    r, w, theta = _tables(vocab=11, dim=6, seed=6)
    ids = _ids((3, 5), vocab=11, seed=7)
    # The authors' get_embedding: positions 1..length, phase = pos * freq + init_phase.
    x = torch.from_numpy(ids)
    amp = torch.nn.functional.embedding(x, torch.from_numpy(r))
    freq = torch.nn.functional.embedding(x, torch.from_numpy(w))
    init = torch.nn.functional.embedding(x, torch.from_numpy(theta % (2 * math.pi)))
    pos = torch.arange(1, 6, 1.0, dtype=torch.float64).unsqueeze(0).unsqueeze(-1).repeat([3, 1, 6])
    phase = torch.mul(pos, freq) + init
    real, imag = complex_order_embedding(ids, np.arange(1, 6), r, w, theta)
    np.testing.assert_allclose(real, (amp * torch.cos(phase)).numpy(), atol=1e-13)
    np.testing.assert_allclose(imag, (amp * torch.sin(phase)).numpy(), atol=1e-13)


# --- backward ----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (2, 6)])
def test_complex_order_grad_matches_torch_autograd(shape):
    torch = require("torch")
    r, w, theta = _tables(seed=8)
    ids = _ids(shape, seed=9)  # repeated ids: the rows sum their uses
    pos = np.random.default_rng(10).uniform(0, 50, size=shape)
    rng = np.random.default_rng(11)
    g_re, g_im = rng.normal(size=shape + (4,)), rng.normal(size=shape + (4,))
    rt, wt, tt = (torch.tensor(t, requires_grad=True) for t in (r, w, theta))
    x = torch.from_numpy(ids)
    phase = torch.from_numpy(pos)[..., None] * wt[x] + tt[x]
    loss = (rt[x] * torch.cos(phase) * torch.from_numpy(g_re)).sum()
    loss = loss + (rt[x] * torch.sin(phase) * torch.from_numpy(g_im)).sum()
    loss.backward()
    d_r, d_w, d_t = complex_order_embedding_grad(ids, pos, r, w, theta, g_re, g_im)
    np.testing.assert_allclose(d_r, rt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d_w, wt.grad.numpy(), rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(d_t, tt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_complex_order_grad_none_is_zero_and_unused_rows_are_zero():
    r, w, theta = _tables(seed=12)
    ids = np.array([0, 2, 2])
    pos = np.arange(3)
    g = np.random.default_rng(13).normal(size=(3, 4))
    only_re = complex_order_embedding_grad(ids, pos, r, w, theta, g, None)
    with_zero = complex_order_embedding_grad(ids, pos, r, w, theta, g, np.zeros_like(g))
    for a, b in zip(only_re, with_zero):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a[[1, 3, 4, 5, 6]], 0.0)


# --- torch tensors: autograd, torch.compile ----------------------------------


def _small(torch, dtype, seed=20):
    """Vocab 5, dim 3, tokens with repeats; the tables and float positions
    require grad."""
    gen = torch.Generator().manual_seed(seed)
    r, w, theta = (torch.randn(5, 3, dtype=torch.float64, generator=gen) for _ in range(3))
    ids = torch.tensor([[0, 2, 2, 4], [1, 0, 4, 4]])
    pos = torch.tensor([1.0, 2.5, 3.0, 7.0], dtype=torch.float64)
    leaves = [t.to(dtype).requires_grad_() for t in (pos, r, w, theta)]
    return ids, leaves


def _formula(torch, ids, pos, r, w, theta):
    """The authors' formula as torch ops: r[t] cos(w[t] pos + theta[t]), r[t] sin(...)."""
    phase = pos[..., None] * w[ids] + theta[ids]
    return r[ids] * torch.cos(phase), r[ids] * torch.sin(phase)


def test_complex_order_torch_gradcheck_pair_and_complex():
    torch = require("torch")
    ids, leaves = _small(torch, torch.float64)

    def pair(*a):
        return complex_order_embedding(ids, *a)

    def complex_(*a):
        return complex_order_embedding(ids, *a, as_complex=True)

    assert pair(*leaves)[0].grad_fn is not None
    assert torch.autograd.gradcheck(pair, tuple(leaves))
    assert torch.autograd.gradcheck(complex_, tuple(leaves))


@pytest.mark.parametrize("as_complex", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_complex_order_torch_gradients_equal_autograd_of_the_formula(dtype, as_complex):
    torch = require("torch")
    ids, leaves = _small(torch, getattr(torch, dtype), seed=21)
    gen = torch.Generator().manual_seed(22)
    g_re, g_im = (torch.randn(2, 4, 3, dtype=torch.float64, generator=gen) for _ in range(2))
    if as_complex:
        z = complex_order_embedding(ids, *leaves, as_complex=True)
        assert z.dtype == (torch.complex128 if dtype == "float64" else torch.complex64)
        # torch's gradient of a complex output: d/d real + i d/d imag
        got = torch.autograd.grad(z, leaves, torch.complex(g_re, g_im).to(z.dtype))
    else:
        real, imag = complex_order_embedding(ids, *leaves)
        assert real.dtype == imag.dtype == getattr(torch, dtype)
        got = torch.autograd.grad((real, imag), leaves, (g_re.to(real.dtype), g_im.to(real.dtype)))
    # the witness in float64 on the same values
    wide = [t.detach().double().requires_grad_() for t in leaves]
    real, imag = _formula(torch, ids, *wide)
    want = torch.autograd.grad((real * g_re + imag * g_im).sum(), wide)
    for a, b, name in zip(got, want, ("positions", "amplitude", "frequency", "phase")):
        assert a.dtype == getattr(torch, dtype), name
        if dtype == "float64":
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
        else:  # rounded once from float64
            torch.testing.assert_close(a, b.float(), rtol=3e-7, atol=1e-6, msg=name)
    if dtype == "float32":  # and the formula run in float32 as a model would
        real, imag = _formula(torch, ids, *leaves)
        loss = (real * g_re.float() + imag * g_im.float()).sum()
        for a, b in zip(got, torch.autograd.grad(loss, leaves)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_complex_order_torch_one_output_unused_is_a_zero_gradient():
    torch = require("torch")
    ids, leaves = _small(torch, torch.float64, seed=23)
    g = torch.randn(2, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(24))
    real, imag = complex_order_embedding(ids, *leaves)
    only_imag = torch.autograd.grad(imag, leaves, g)
    real, imag = complex_order_embedding(ids, *leaves)
    with_zero = torch.autograd.grad((real, imag), leaves, (torch.zeros_like(g), g))
    for a, b in zip(only_imag, with_zero):
        assert torch.equal(a, b)
    # the tables as the NumPy backward gives them with grad_real None
    arrays = [t.detach().numpy() for t in leaves]
    tables = complex_order_embedding_grad(ids.numpy(), *arrays, None, g.numpy())
    for a, b in zip(only_imag[1:], tables):
        np.testing.assert_array_equal(a.numpy(), b)
    # a position's, written out: d imag / d pos = w r cos(phase), summed over features and rows
    pos, r, w, theta = (t.detach() for t in leaves)
    phase = pos[..., None] * w[ids] + theta[ids]
    d_pos = (w[ids] * r[ids] * torch.cos(phase) * g).sum(-1).sum(0)
    torch.testing.assert_close(only_imag[0], d_pos, rtol=1e-12, atol=1e-12)


def test_complex_order_torch_integer_positions_and_a_gradients_gradient():
    torch = require("torch")
    ids, (_, *tables) = _small(torch, torch.float64, seed=25)
    real, imag = complex_order_embedding(ids, torch.arange(1, 5), *tables)
    real64, imag64 = _formula(torch, ids, torch.arange(1.0, 5.0, dtype=torch.float64), *tables)
    got = torch.autograd.grad((real + imag).sum(), tables, create_graph=True)
    want = torch.autograd.grad((real64 + imag64).sum(), tables)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="posenc.relative_grad"):  # refused, not a zero
        got[0].sum().backward()


def test_complex_order_torch_compile_fullgraph_equals_eager_bits():
    torch = require("torch")
    ids, leaves = _small(torch, torch.float32, seed=26)
    gen = torch.Generator().manual_seed(27)
    g_re, g_im = (torch.randn(2, 4, 3, generator=gen) for _ in range(2))

    def pair(ids, *a):
        return complex_order_embedding(ids, *a)

    def complex_(ids, *a):
        return (complex_order_embedding(ids, *a, as_complex=True),)

    def run(fn, grads):
        outs = fn(ids, *leaves)
        used = [(o, g) for o, g in zip(outs, grads) if g is not None]
        got = torch.autograd.grad([o for o, _ in used], leaves, [g for _, g in used])
        return [o.detach() for o in outs] + list(got)

    cases = [(pair, (g_re, g_im)), (pair, (None, g_im)), (complex_, (torch.complex(g_re, g_im),))]
    for fn, grads in cases:
        eager = run(fn, grads)
        compiled = run(torch.compile(fn, fullgraph=True), grads)
        for a, b in zip(eager, compiled):
            assert a.dtype == b.dtype and torch.equal(a, b), fn.__name__


# --- JAX arrays: jax.grad, jax.jit, jax.vmap ---------------------------------


def _jax_formula(jnp, ids, pos, r, w, theta):
    phase = pos[..., None] * w[ids] + theta[ids]
    return r[ids] * jnp.cos(phase), r[ids] * jnp.sin(phase)


def test_complex_order_jax_grad_jit_vmap_equal_jax_autodiff_of_the_formula():
    jax = require("jax")
    jnp = require("jax.numpy")
    x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else require("jax.experimental").enable_x64
    rng = np.random.default_rng(28)
    formula = partial(_jax_formula, jnp)

    def loss(fn, g_re, g_im, ids):
        def f(pos, r, w, theta):
            real, imag = fn(ids, pos, r, w, theta)
            return (real * g_re).sum() + (imag * g_im).sum()

        return f

    def parts(ids, *a):  # the complex result's parts: JAX's complex cotangent
        z = complex_order_embedding(ids, *a, as_complex=True)
        return z.real, z.imag

    def imag_only(ids, *a):  # the real part unused: a symbolic zero cotangent
        return 0.0, complex_order_embedding(ids, *a)[1]

    def formula_imag(ids, *a):
        return 0.0, formula(ids, *a)[1]

    every = (0, 1, 2, 3)
    with x64(True):
        ids = jnp.asarray([[0, 2, 2, 4], [1, 0, 4, 4]])
        pos = jnp.asarray([1.0, 2.5, 3.0, 7.0])
        r, w, theta = (jnp.asarray(rng.normal(size=(5, 3))) for _ in range(3))
        g = [jnp.asarray(rng.normal(size=(2, 4, 3))) for _ in range(2)]
        args = (pos, r, w, theta)
        want = jax.grad(loss(formula, *g, ids), every)(*args)
        for fn in (complex_order_embedding, parts):
            for transform in (lambda f: f, jax.jit):
                got = transform(jax.grad(loss(fn, *g, ids), every))(*args)
                for a, b in zip(got, want):
                    assert a.dtype == b.dtype
                    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        got = jax.grad(loss(imag_only, *g, ids), every)(*args)
        for a, b in zip(got, jax.grad(loss(formula_imag, *g, ids), every)(*args)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        # vmap over a batch of amplitude tables
        tables = jnp.stack([r, 2 * r, -r])

        def batched(fn):
            return jax.vmap(jax.grad(lambda r: loss(fn, *g, ids)(pos, r, w, theta)))(tables)

        np.testing.assert_allclose(
            batched(complex_order_embedding), batched(formula), rtol=1e-12, atol=1e-12
        )
        # integer positions traced beside the tables: no gradient of their own
        jitted = jax.jit(
            jax.grad(lambda r, p: loss(complex_order_embedding, *g, ids)(p, r, w, theta))
        )
        want = jax.grad(lambda r: loss(formula, *g, ids)(jnp.arange(4.0), r, w, theta))(r)
        np.testing.assert_allclose(jitted(r, jnp.arange(4)), want, rtol=1e-12, atol=1e-12)
        # one position for every token, a Python number
        got = jax.grad(lambda p: loss(complex_order_embedding, *g, ids)(p, r, w, theta))(2.5)
        want = jax.grad(lambda p: loss(formula, *g, ids)(p, r, w, theta))(2.5)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --- bad input ---------------------------------------------------------------


def test_complex_order_bad_input_names_the_argument():
    r, w, theta = _tables()
    ids = _ids((2, 3))
    pos = np.arange(3)
    with pytest.raises(TypeError, match="token_ids"):
        complex_order_embedding(ids.astype(float), pos, r, w, theta)
    with pytest.raises(ValueError, match="token_ids"):
        complex_order_embedding([0, 7], [0, 1], r, w, theta)
    with pytest.raises(ValueError, match="token_ids"):
        complex_order_embedding([-1], [0], r, w, theta)
    with pytest.raises(ValueError, match="positions"):
        complex_order_embedding(ids, np.arange(4), r, w, theta)
    with pytest.raises(ValueError, match="positions"):
        complex_order_embedding(ids[0], np.zeros((2, 3)), r, w, theta)
    with pytest.raises(ValueError, match="positions"):
        complex_order_embedding(ids, [0, math.nan, 1], r, w, theta)
    with pytest.raises(ValueError, match="frequency"):
        complex_order_embedding(ids, pos, r, w[:, :3], theta)
    with pytest.raises(ValueError, match="amplitude"):
        complex_order_embedding(ids, pos, r[0], w, theta)
    with pytest.raises(TypeError, match="phase"):
        complex_order_embedding(ids, pos, r, w, theta.astype(np.int64))
    bad = r.copy()
    bad[ids[0, 0], 0] = math.inf
    with pytest.raises(ValueError, match="amplitude must be finite"):
        complex_order_embedding(ids, pos, bad, w, theta)
    with pytest.raises(ValueError, match="phase must be finite"):
        complex_order_embedding_grad(ids, pos, r, w, bad, None, None)
    with pytest.raises(TypeError, match="as_complex"):
        complex_order_embedding(ids, pos, r, w, theta, as_complex="yes")
    with pytest.raises(ValueError, match="grad_real"):
        complex_order_embedding_grad(ids, pos, r, w, theta, np.zeros((2, 3, 3)), None)
    with pytest.raises(TypeError, match="grad_imag"):
        complex_order_embedding_grad(ids, pos, r, w, theta, None, np.zeros((2, 3, 4), int))


def test_complex_order_leaves_inputs_untouched():
    r, w, theta = _tables()
    ids = _ids((2, 3))
    pos = np.arange(3.0)
    g = np.ones((2, 3, 4))
    copies = [x.copy() for x in (ids, pos, r, w, theta, g)]
    complex_order_embedding(ids, pos, r, w, theta)
    complex_order_embedding_grad(ids, pos, r, w, theta, g, g)
    for x, c in zip((ids, pos, r, w, theta, g), copies):
        np.testing.assert_array_equal(x, c)


@pytest.mark.parametrize("mixed", [False, True])
def test_complex_order_non_finite_row_raises_and_leaves_inputs_untouched(mixed):
    # the kernel finds the value; the message names the table (amplitude
    # first, as a pass over each table in turn would), nothing of the
    # caller's is written
    r, w, theta = _tables(dtype=np.float32)
    if mixed:  # only the used rows converted first
        w = w.astype(np.float64)
    ids = _ids((2, 3))
    pos = np.arange(3.0)
    for names in (["frequency"], ["phase"], ["amplitude"], ["phase", "amplitude"]):
        tables = {"amplitude": r.copy(), "frequency": w.copy(), "phase": theta.copy()}
        for k, name in enumerate(names):
            tables[name][ids[1, 2 - k], k + 1] = math.nan if k else -math.inf
        copies = [x.copy() for x in (ids, pos, *tables.values())]
        want = "amplitude" if "amplitude" in names else names[0]
        for as_complex in (False, True):
            with pytest.raises(ValueError, match=f"^{want} must be finite in the rows"):
                complex_order_embedding(ids, pos, *tables.values(), as_complex=as_complex)
        for x, c in zip((ids, pos, *tables.values()), copies):
            np.testing.assert_array_equal(x, c)


def test_complex_order_reads_only_the_rows_the_tokens_use():
    # a vocabulary's table with a non-finite row no token uses: the result of
    # the others is the reference's, as an embedding lookup gives it
    r, w, theta = _tables()
    ids = np.array([[1, 2, 2], [5, 1, 3]])
    bad = [t.copy() for t in (r, w, theta)]
    for t in bad:
        t[0] = math.nan
        t[6] = math.inf
    real, imag = complex_order_embedding(ids, [1, 2, 3], *bad)
    want = reference.complex_order_embedding(ids, [1, 2, 3], r, w, theta)
    np.testing.assert_allclose(real, want.real, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(imag, want.imag, rtol=1e-13, atol=1e-13)
    grads = complex_order_embedding_grad(ids, [1, 2, 3], *bad, np.ones(real.shape), None)
    for g in grads:
        assert np.all(g[[0, 4, 6]] == 0) and np.isfinite(g).all()
