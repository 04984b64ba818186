"""Complex-order embeddings (Wang et al. 2020): against the float64 twin, the
authors' module written in torch, a hand-derived case; the gradients of the
three tables against torch.autograd; bad input refused."""

import math

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
    bad[0, 0] = math.inf
    with pytest.raises(ValueError, match="amplitude"):
        complex_order_embedding(ids, pos, bad, w, theta)
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
