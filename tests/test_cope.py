"""CoPE (contextual position encoding): the forward against the float64 twin,
x-transformers' CoPE and the authors' formula written in torch; the backward
against torch.autograd of that formula; bad input refused."""

import math

import numpy as np
import pytest
from optional import require

from posenc import _cope
from posenc import _reference_newer as reference
from posenc.cope import cope_bias, cope_bias_grad

SIZES = [(1, 1, 1, 1, 1, 1), (2, 3, 4, 6, 5, 4), (1, 2, 5, 5, 3, 3), (2, 1, 3, 7, 4, 16)]


def _inputs(batch, heads, q_len, k_len, dim, npos, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, heads, q_len, dim))
    a = rng.normal(size=(batch, heads, q_len, k_len)) * scale
    e = rng.normal(size=(npos, dim))
    return q, a, e


def _authors_torch(torch, q, a, e_authors, mask, sigmoid=None):
    """The authors' CoPE.forward (facebookresearch/RAM, projects/cope) in
    torch, on logits with the causal mask's log added as their example does."""
    logits = a + mask.log()
    gates = (sigmoid or torch.sigmoid)(logits)
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)
    pos = pos.clamp(max=e_authors.shape[-1] - 1)
    pos_ceil = pos.ceil().long()
    pos_floor = pos.floor().long()
    logits_int = torch.matmul(q, e_authors)
    logits_ceil = logits_int.gather(-1, pos_ceil)
    logits_floor = logits_int.gather(-1, pos_floor)
    w = pos - pos_floor
    return logits_ceil * w + logits_floor * (1 - w)


# --- forward -----------------------------------------------------------------


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("causal", [True, False])
def test_cope_matches_float64_reference(sizes, causal):
    q, a, e = _inputs(*sizes)
    got = cope_bias(q, a, e, causal=causal)
    want = reference.cope_bias(q, a, e, causal=causal)
    assert got.dtype == np.float64 and got.shape == a.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cope_q_offset_matches_reference():
    q, a, e = _inputs(1, 2, 3, 8, 4, 6, seed=3)
    for off in (0, 2, 5, 7):
        np.testing.assert_allclose(
            cope_bias(q, a, e, q_offset=off), reference.cope_bias(q, a, e, q_offset=off), atol=1e-12
        )


def test_cope_hand_derived_two_tokens():
    # Logits 0: every gate 0.5.  Causal 2x2: row 0 sees key 0 at p = 0.5,
    # key 1 is in the future (p = 0); row 1: key 0 at p = 1, key 1 at 0.5.
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    e = np.array([[2.0, 3.0], [5.0, 7.0], [11.0, 13.0]])  # z_0 = q.e[0], z_1 = q.e[1]
    got = cope_bias(q, np.zeros((2, 2)), e)
    want = np.array([[0.5 * 2 + 0.5 * 5, 2.0], [7.0, 0.5 * 3 + 0.5 * 7]])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_cope_clips_positions_at_npos_max_minus_one():
    # 6 visible keys with gates near 1 count past npos_max - 1 = 2.
    q = np.ones((1, 6, 1))
    e = np.array([[0.0], [10.0], [20.0]])
    got = cope_bias(q, np.full((1, 6, 6), 50.0), e)
    assert got[0, 5, 0] == pytest.approx(20.0, abs=1e-12)  # p = 6 -> clipped to 2
    assert got[0, 5, 5] == pytest.approx(10.0, abs=1e-12)  # p = sigmoid(50) ~ 1


def test_cope_causal_ignores_future_logits():
    q, a, e = _inputs(2, 2, 4, 4, 3, 5, seed=5)
    b = a.copy()
    b[..., np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] = 123.0
    np.testing.assert_array_equal(cope_bias(q, a, e), cope_bias(q, b, e))


def test_cope_minus_inf_logits_are_masked_keys():
    q, a, e = _inputs(1, 1, 4, 4, 3, 5, seed=6)
    masked = np.where(np.tril(np.ones((4, 4), bool)), a, -np.inf)
    np.testing.assert_allclose(
        cope_bias(q, masked, e, causal=False), cope_bias(q, a, e), atol=1e-15
    )


def test_cope_authors_layout_gives_the_same():
    q, a, e = _inputs(2, 3, 4, 6, 5, 4, seed=7)
    np.testing.assert_array_equal(cope_bias(q, a, e.T[None]), cope_bias(q, a, e))


def test_cope_float32_rounds_the_float64_result_once():
    q, a, e = _inputs(2, 2, 3, 5, 4, 4, seed=8)
    q32, a32, e32 = q.astype(np.float32), a.astype(np.float32), e.astype(np.float32)
    got = cope_bias(q32, a32, e32)
    assert got.dtype == np.float32
    want = reference.cope_bias(q32, a32, e32).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("logits_are_scores", [False, True], ids=["scores", "logits"])
def test_cope_scores_added_in_place(logits_are_scores):
    # logits: attn_logits += cpe(query, attn_logits) as the authors add them, the
    # bias formed before the write.
    q, a, e = _inputs(2, 2, 3, 5, 4, 4, seed=9)
    scores = a.copy() if logits_are_scores else np.arange(a.size, dtype=np.float64).reshape(a.shape)
    before = scores.copy()
    got = cope_bias(q, scores if logits_are_scores else a, e, scores=scores)
    assert got is scores
    np.testing.assert_allclose(scores, before + reference.cope_bias(q, a, e), atol=1e-12)


def test_cope_leaves_inputs_untouched():
    q, a, e = _inputs(2, 2, 3, 5, 4, 4, seed=10)
    copies = [x.copy() for x in (q, a, e)]
    cope_bias(q, a, e)
    cope_bias_grad(q, a, e, np.ones_like(a))
    for x, c in zip((q, a, e), copies):
        np.testing.assert_array_equal(x, c)


# --- witnesses: x-transformers and the authors' formula ----------------------


@pytest.mark.parametrize("sizes", SIZES)
def test_cope_matches_x_transformers(sizes):
    torch = require("torch")
    xt = require("x_transformers.x_transformers")
    batch, heads, q_len, k_len, dim, npos = sizes
    q, a, e = _inputs(*sizes, seed=11)
    module = xt.CoPE(dim=dim, heads=heads, max_pos=npos).double()
    with torch.no_grad():
        module.pos_emb.copy_(torch.from_numpy(e))
    # x-transformers' Attend masks the future with -finfo.max before CoPE.
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    logits = torch.from_numpy(a).masked_fill(future, -torch.finfo(torch.float64).max)
    with torch.no_grad():
        want = module(torch.from_numpy(q), logits).numpy()
    np.testing.assert_allclose(cope_bias(q, a, e), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes", SIZES)
def test_cope_matches_the_authors_formula_in_torch(sizes):
    torch = require("torch")
    q, a, e = _inputs(*sizes, seed=12)
    q_len, k_len = a.shape[-2:]
    mask = torch.ones(q_len, k_len, dtype=torch.float64).tril(k_len - q_len)
    want = _authors_torch(
        torch, torch.from_numpy(q), torch.from_numpy(a), torch.from_numpy(e.T[None].copy()), mask
    )
    np.testing.assert_allclose(cope_bias(q, a, e.T[None]), want.numpy(), rtol=1e-12, atol=1e-12)


# --- backward ----------------------------------------------------------------


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("layout", ["rows", "authors"])
def test_cope_grad_matches_torch_autograd(sizes, layout):
    torch = require("torch")
    q, a, e = _inputs(*sizes, seed=13)
    q_len, k_len = a.shape[-2:]
    grad = np.random.default_rng(14).normal(size=a.shape)
    e_authors = e.T[None].copy()
    qt = torch.tensor(q, requires_grad=True)
    at = torch.tensor(a, requires_grad=True)
    et = torch.tensor(e_authors, requires_grad=True)
    mask = torch.ones(q_len, k_len, dtype=torch.float64).tril(k_len - q_len)
    _authors_torch(torch, qt, at, et, mask).backward(torch.from_numpy(grad))
    emb = e if layout == "rows" else e_authors
    d_q, d_a, d_e = cope_bias_grad(q, a, emb, grad)
    np.testing.assert_allclose(d_q, qt.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(d_a, at.grad.numpy(), rtol=1e-11, atol=1e-12)
    want_e = et.grad.numpy() if layout == "authors" else et.grad.numpy()[0].T
    assert d_e.shape == emb.shape
    np.testing.assert_allclose(d_e, want_e, rtol=1e-11, atol=1e-12)


def test_cope_grad_non_causal_matches_torch_autograd():
    torch = require("torch")
    q, a, e = _inputs(2, 2, 5, 5, 3, 4, seed=15)
    grad = np.random.default_rng(16).normal(size=a.shape)
    qt, at = torch.tensor(q, requires_grad=True), torch.tensor(a, requires_grad=True)
    et = torch.tensor(e.T[None].copy(), requires_grad=True)
    _authors_torch(torch, qt, at, et, torch.ones(5, 5, dtype=torch.float64)).backward(
        torch.from_numpy(grad)
    )
    d_q, d_a, d_e = cope_bias_grad(q, a, e, grad, causal=False)
    np.testing.assert_allclose(d_q, qt.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(d_a, at.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(d_e, et.grad.numpy()[0].T, atol=1e-12)


def test_cope_grad_extreme_logits_match_torch_autograd():
    # Far from 0, sigmoid' is tiny but not 0 and must keep its relative
    # accuracy on both sides.  The witness spells the authors' sigmoid as
    # exp(-softplus(-a)), whose autograd derivative is sigmoid(a) sigmoid(-a);
    # torch.sigmoid's y (1 - y) loses the digits of 1 - y at large a.
    torch = require("torch")
    a = np.array([[[-40.0, -700.0, 30.0, -36.5], [-745.0, 35.0, -20.0, 710.0]]])
    q = np.array([[[0.5, -1.0], [2.0, 0.25]]])
    e = np.array([[1.0, 2.0], [-3.0, 0.5], [4.0, -1.5]])
    grad = np.array([[[1.0, -2.0, 0.5, 3.0], [0.25, 1.5, -1.0, 2.0]]])
    qt, at = torch.tensor(q, requires_grad=True), torch.tensor(a, requires_grad=True)
    et = torch.tensor(e.T[None].copy(), requires_grad=True)
    mask = torch.ones(2, 4, dtype=torch.float64)

    def sigmoid(x):
        return torch.exp(-torch.nn.functional.softplus(-x))

    _authors_torch(torch, qt, at, et, mask, sigmoid).backward(torch.from_numpy(grad))
    _, d_a, _ = cope_bias_grad(q, a, e, grad, causal=False)
    want = at.grad.numpy()
    assert (want != 0).sum() >= 5
    np.testing.assert_allclose(d_a, want, rtol=1e-12, atol=1e-300)


def test_cope_grad_of_pos_emb_by_finite_differences():
    # The bias is linear in pos_emb: a central difference is exact up to rounding.
    q, a, e = _inputs(1, 2, 3, 4, 3, 5, seed=17)
    grad = np.random.default_rng(18).normal(size=a.shape)
    _, _, d_e = cope_bias_grad(q, a, e, grad)
    h = 1e-6
    for p, d in [(0, 0), (1, 2), (4, 1)]:
        up, down = e.copy(), e.copy()
        up[p, d] += h
        down[p, d] -= h
        fd = ((reference.cope_bias(q, a, up) - reference.cope_bias(q, a, down)) * grad).sum() / (
            2 * h
        )
        assert d_e[p, d] == pytest.approx(fd, rel=1e-6, abs=1e-8)


# --- bad input ---------------------------------------------------------------


def test_cope_bad_input_names_the_argument():
    q, a, e = _inputs(1, 2, 3, 4, 5, 4)
    with pytest.raises(TypeError, match="query"):
        cope_bias(q.astype(np.int64), a, e)
    with pytest.raises(ValueError, match="attn_logits"):
        cope_bias(q, a[..., :2, :], e)
    with pytest.raises(ValueError, match="attn_logits"):
        cope_bias(q, a[0], e)
    with pytest.raises(ValueError, match="pos_emb"):
        cope_bias(q, a, e[:, :3])
    with pytest.raises(ValueError, match="pos_emb"):
        cope_bias(q, a, e.T[None, :3])
    with pytest.raises(ValueError, match="pos_emb"):
        cope_bias(q, a, e[:0])
    bad = a.copy()
    bad[0, 0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="attn_logits"):
        cope_bias(q, bad, e)
    bad[0, 0, 0, 0] = math.inf
    with pytest.raises(ValueError, match="attn_logits"):
        cope_bias(q, bad, e)
    with pytest.raises(ValueError, match="query"):
        cope_bias(np.full_like(q, math.inf), a, e)
    with pytest.raises(TypeError, match="causal"):
        cope_bias(q, a, e, causal=1)
    with pytest.raises(TypeError, match="q_offset"):
        cope_bias(q, a, e, q_offset=1.5)
    with pytest.raises(ValueError, match="scores"):
        cope_bias(q, a, e, scores=np.zeros(a.shape[:-1]))
    with pytest.raises(TypeError, match="scores"):
        cope_bias(q, a, e, scores=a.tolist())
    with pytest.raises(ValueError, match="grad"):
        cope_bias_grad(q, a, e, np.ones(a.shape[:-1]))


def test_cope_refused_scores_left_untouched():
    q, a, e = _inputs(1, 2, 3, 4, 5, 4)
    scores = np.ones(a.shape)
    bad = a.copy()
    bad[0, 0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="attn_logits"):
        cope_bias(q, bad, e, scores=scores)
    np.testing.assert_array_equal(scores, 1.0)
    readonly = np.zeros(a.shape)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="scores"):
        cope_bias(q, a, e, scores=readonly)


def test_cope_through_torch_autograd_compile_and_jax():
    torch = require("torch")
    jax = require("jax")
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 2, 4, 3, dtype=torch.float64, generator=gen).requires_grad_()
    k = torch.randn(2, 2, 5, 3, dtype=torch.float64, generator=gen)
    logits = (q.detach() @ k.transpose(-1, -2)).requires_grad_()
    emb = torch.randn(6, 3, dtype=torch.float64, generator=gen).requires_grad_()
    scores = torch.randn(2, 2, 4, 5, dtype=torch.float64, generator=gen).requires_grad_()

    def added(s, q, a, e):
        return cope_bias(q, a, e, causal=False, scores=s.clone())

    assert torch.autograd.gradcheck(added, (scores, q, logits, emb))
    compiled = torch.compile(lambda q, a, e: cope_bias(q, a, e), fullgraph=True)
    assert torch.equal(compiled(q, logits, emb), cope_bias(q, logits, emb))
    # JAX's gradients are torch's (both adapt one backward rule)
    if hasattr(jax, "enable_x64"):
        x64 = jax.enable_x64
    else:
        from jax.experimental import enable_x64 as x64
    with x64(True):
        arrays = [jax.numpy.asarray(t.detach().numpy()) for t in (q, logits, emb)]
        got = jax.grad(lambda *a: (cope_bias(*a) ** 2).sum(), argnums=(0, 1, 2))(*arrays)
    (cope_bias(q, logits, emb) ** 2).sum().backward()
    for g, t in zip(got, (q, logits, emb)):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-12, atol=1e-14)


# --- the kernel (posenc._core.cope) against the NumPy path, bit for bit -------


def _args(q, a, e, causal=True, q_offset=None):
    return _cope.Args(q, a, e, causal, q_offset)


def _gate_sources():
    """Gates made by the kernel and given (by posenc._cope's _sigmoid)."""
    return [True, False]


def test_cope_exp_is_within_one_ulp_from_zero_down_to_the_underflow():
    # posenc's exp (the gates' e = exp(-|a|)), against the long double exp of
    # x86-64's 64-bit significands: the error in units of the exact value's
    # last place, for the normal results and the subnormal ones
    from posenc import _core

    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("needs a long double with a 64-bit significand (x86-64)")
    rng = np.random.default_rng(40)
    x = np.concatenate(
        [
            -rng.uniform(0, 746, 1_000_000),
            -rng.uniform(0, 1, 300_000),
            -np.exp(rng.uniform(-700, 0, 200_000)),  # tiny |x|: e^x near 1
            -np.log(2) * np.arange(0, 1076) / 2,  # the ends of the reduction's ranges
            [0.0, -0.0, -5e-324, -708.39, -708.4, -744.4, -745.13, -745.14, -746.0, -800.0],
        ]
    )
    got = np.empty_like(x)
    _core.cope_gates(x, got, True)
    exact = np.exp(x.astype(np.longdouble))
    ulp = np.spacing(exact.astype(np.float64)).astype(np.longdouble)
    err = (np.abs(got.astype(np.longdouble) - exact) / ulp).astype(np.float64)
    assert err.max() <= 1.0, (err.max(), x[err.argmax()])
    assert got[-1] == 0.0 and got[-2] == 0.0 and got[-10] == 1.0 and got[-9] == 1.0
    inf = np.array([-np.inf])
    _core.cope_gates(inf, got[:1], True)
    assert got[0] == 0.0
    with pytest.raises(ValueError, match="attn_logits"):
        _core.cope_gates(np.array([0.5]), np.empty(1), True)


def test_cope_gates_are_the_sigmoid_within_three_ulp():
    # the gates from posenc's exp, against the long double sigmoid
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("needs a long double with a 64-bit significand (x86-64)")
    a = np.random.default_rng(41).normal(size=200_000) * 8
    a[:4] = [0.0, -0.0, 745.0, -745.0]
    got = _cope.sigmoid_of(a)
    al = a.astype(np.longdouble)
    exact = 1 / (1 + np.exp(-al))
    ulp = np.spacing(exact.astype(np.float64)).astype(np.longdouble)
    assert (np.abs(got.astype(np.longdouble) - exact) / ulp).max() <= 3.0


@pytest.mark.parametrize("npos", [1, 3, 4, 16, 21, 37])
def test_cope_products_are_the_sums_in_the_order_of_the_head_dim(npos):
    # z[r, p] = ((q[r, 0] e[0, p] + q[r, 1] e[1, p]) + ...): NumPy's float64
    # ops one head dim at a time, bit for bit, whatever the positions' tail
    from posenc import _core

    rng = np.random.default_rng(42)
    q, et = rng.normal(size=(70, 9)), rng.normal(size=(9, npos))
    want = q[:, :1] * et[0]
    for k in range(1, 9):
        want = want + q[:, k : k + 1] * et[k]
    got = np.empty((70, npos))
    _core.cope_products(q, et, got)
    _same_bits(got, want)
    with pytest.raises(ValueError, match="pos_emb"):
        _core.cope_products(q, et[:5], got)


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _both_paths(q, a, e, scores=None, causal=True, q_offset=None, gates_in_c=True):
    """(kernel, NumPy path) results of one call, each on its own copy of scores."""
    args = _args(q, a, e, causal, q_offset)
    s1 = None if scores is None else scores.copy()
    s2 = None if scores is None else scores.copy()
    got = _cope.bias_kernel(args, s1, gates_in_c)
    assert got is not None
    return got, _cope.bias_numpy(args, s2)


KERNEL_SIZES = [(2, 3, 4, 6, 5, 4), (1, 2, 7, 3, 3, 3), (2, 1, 5, 40, 4, 16), (1, 1, 3, 9, 2, 1)]


@pytest.mark.parametrize("sizes", KERNEL_SIZES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("gates_in_c", _gate_sources())
def test_cope_kernel_is_the_numpy_path_bit_for_bit(sizes, causal, dtype, gates_in_c):
    # q_len below, equal to and above k_len; positions clipped (npos 1, 3, 4)
    # and not (npos 16); the bias written in the inputs' dtype and added into
    # scores of each dtype
    q, a, e = (x.astype(dtype) for x in _inputs(*sizes, seed=21, scale=3.0))
    got, want = _both_paths(q, a, e, causal=causal, gates_in_c=gates_in_c)
    _same_bits(got, want)
    for sdt in ["float16", "float32", "float64"]:
        scores = np.random.default_rng(22).normal(size=a.shape).astype(sdt) * 8
        got, want = _both_paths(q, a, e, scores, causal=causal, gates_in_c=gates_in_c)
        _same_bits(got, want)


@pytest.mark.parametrize("q_offset", [-9, -2, 0, 1, 4, 30])
@pytest.mark.parametrize("gates_in_c", _gate_sources())
def test_cope_kernel_q_offset_is_the_numpy_path(q_offset, gates_in_c):
    # offsets that hide every key, some, or none of them
    q, a, e = _inputs(2, 2, 5, 8, 3, 6, seed=23)
    scores = np.random.default_rng(24).normal(size=a.shape).astype(np.float32)
    for s in (None, scores):
        got, want = _both_paths(q, a, e, s, q_offset=q_offset, gates_in_c=gates_in_c)
        _same_bits(got, want)


@pytest.mark.parametrize("gates_in_c", _gate_sources())
def test_cope_kernel_extreme_and_masked_logits_are_the_numpy_path(gates_in_c):
    # -inf (gate 0), +-0 (log 2's branch), logits whose gate rounds to 1 or
    # underflows, tiny ones, and whole rows masked
    values = [-np.inf, -0.0, 0.0, 745.0, -745.0, 40.0, -40.0, 1e-300, -1e-300, 36.7, -709.5, 3.0]
    rng = np.random.default_rng(25)
    a = rng.choice(values, size=(2, 3, 6, 12))
    a[0, 1, 2] = -np.inf
    q, _, e = _inputs(2, 3, 6, 12, 4, 5, seed=26)
    for causal in (True, False):
        for s in (None, rng.normal(size=a.shape)):
            got, want = _both_paths(q, a, e, s, causal=causal, gates_in_c=gates_in_c)
            _same_bits(got, want)


def test_cope_kernel_scores_minus_inf_and_signed_zeros_are_the_numpy_path():
    # masked scores stay -inf; a zero table gives z = +-0 and the signs of
    # the sums are NumPy's
    q, a, e = _inputs(1, 2, 4, 5, 3, 4, seed=27)
    e[1] = 0.0
    q[0, 0, 0] = -q[0, 0, 0]
    scores = np.where(np.tril(np.ones((4, 5), bool), 1), -0.0, -np.inf) * np.ones(a.shape)
    for gates_in_c in _gate_sources():
        got, want = _both_paths(q, a, e, scores, gates_in_c=gates_in_c)
        _same_bits(got, want)


def test_cope_public_function_takes_the_kernel_and_gives_the_numpy_bits():
    # cope_bias itself (4-D, 3-D, 5-D, strided scores, scores as the logits)
    q, a, e = _inputs(2, 3, 4, 6, 5, 4, seed=28)
    _same_bits(cope_bias(q, a, e), _cope.bias_numpy(_args(q, a, e), None))
    q5, a5 = q.reshape(2, 3, 1, 4, 5), a.reshape(2, 3, 1, 4, 6)
    _same_bits(cope_bias(q5, a5, e), _cope.bias_numpy(_args(q5, a5, e), None))
    _same_bits(cope_bias(q[0], a[0], e), _cope.bias_numpy(_args(q[0], a[0], e), None))
    big = np.random.default_rng(29).normal(size=(2, 3, 4, 12)).astype(np.float32)
    want = big.copy()
    _cope.bias_numpy(_args(q, a, e), want[..., ::2])
    cope_bias(q, a, e, scores=big[..., ::2])
    _same_bits(big, want)
    s = a.copy()
    want = _cope.bias_numpy(_args(q, a, e), a.copy())
    cope_bias(q, s, e, scores=s)
    _same_bits(s, want)


@pytest.mark.parametrize("gates_in_c", _gate_sources())
def test_cope_kernel_one_and_two_threads_give_the_same_bits(gates_in_c):
    import posenc

    # 2 * 64 * 300 elements: above the size from which the kernel uses its threads
    q, a, e = _inputs(1, 2, 64, 300, 4, 40, seed=30, scale=1.0)
    scores = np.random.default_rng(31).normal(size=a.shape).astype(np.float32)
    before = posenc.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            posenc.set_num_threads(n)
            results.append(_both_paths(q, a, e, scores, gates_in_c=gates_in_c))
    finally:
        posenc.set_num_threads(before)
    (one, want), (two, _) = results
    _same_bits(one, want)
    _same_bits(two, want)


COPE_BITS = """
import hashlib
import numpy as np
import posenc
from posenc import _cope
digest = hashlib.sha256()
rng = np.random.default_rng(32)
q, a, e = rng.normal(size=(2, 3, 9, 5)), rng.normal(size=(2, 3, 9, 21)) * 3, rng.normal(size=(7, 5))
for dt in ["float16", "float32", "float64"]:
    for causal in (True, False):
        for gates_in_c in (True, False):
            args = _cope.Args(q.astype(dt), a.astype(dt), e.astype(dt), causal, None)
            s = (rng.normal(size=a.shape) * 4).astype(dt)
            _cope.bias_kernel(args, s, gates_in_c)
            digest.update(s.tobytes())
            digest.update(_cope.bias_kernel(args, None, gates_in_c).tobytes())
print(posenc.simd_path(), digest.hexdigest())
"""


def test_cope_kernel_portable_path_in_a_child_gives_the_same_bits():
    import child_process

    child_process.assert_every_path_gives_the_same_bits(COPE_BITS)


def test_cope_core_refuses_bad_arguments_and_leaves_scores_untouched():
    from posenc import _core

    rng = np.random.default_rng(33)
    logits = rng.normal(size=(2, 3, 4, 5))
    q = rng.normal(size=(24, 7))  # a query row per row of the scores, head dim 7
    et = rng.normal(size=(7, 6))  # the table transposed: (head dim, npos)
    scores = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    before = scores.copy()
    nan = logits.copy()
    nan[1, 2, 3, 4] = np.nan
    posinf = logits.astype(np.float16)
    posinf[0, 0, 0, 0] = np.inf

    def cope(a=logits, query=q, table=et, s=scores, causal=True, offset=1, *gates):
        return lambda: _core.cope(a, query, table, s, causal, offset, True, *gates)

    for call, exc, match in [
        (cope(logits.astype(np.int32)), TypeError, "attn_logits"),
        (cope(logits[0]), ValueError, "attn_logits"),
        (cope(logits[:, :2]), ValueError, "attn_logits"),
        (cope(nan), ValueError, "attn_logits"),
        (cope(posinf, causal=False), ValueError, "attn_logits"),
        (cope(query=q.astype(np.int32)), TypeError, "query"),
        (cope(query=q[:23]), ValueError, "query"),
        (cope(query=q[:, :0], table=et[:0]), ValueError, "query"),
        (cope(table=et[:6]), ValueError, "pos_emb"),
        (cope(table=et[:, :0]), ValueError, "pos_emb"),
        (cope(table=et.astype(np.float32)), TypeError, "pos_emb"),
        (cope(table=et[:, ::2]), ValueError, "pos_emb"),
        (cope(s=scores.astype(np.int32)), TypeError, "scores"),
        (cope(s=scores[0]), ValueError, "scores"),
        (cope(s=scores.tolist()), TypeError, "scores"),
        (cope(offset=2**60), ValueError, "q_offset"),
        (cope(logits.astype(np.float32), q, et, scores, True, 1, True), TypeError, "gates"),
    ]:
        with pytest.raises(exc, match=match):
            call()
        np.testing.assert_array_equal(scores, before)
    readonly = scores.copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="scores"):
        _core.cope(logits, q, et, readonly, True, 1, True)
    # scores sharing bytes with the logits other than as the logits
    # themselves, or with the queries or the table
    both = rng.normal(size=(2, 3, 4, 6))
    kept = both.copy()
    with pytest.raises(ValueError, match="scores"):
        _core.cope(both[..., 1:], q, et, both[..., :5], True, 1, True)
    with pytest.raises(ValueError, match="scores"):
        _core.cope(logits, both.reshape(24, 6)[:, :5], et[:5], both[..., :5], True, 1, True)
    table_in_scores = rng.normal(size=(2, 3, 4, 5))
    kept_too = table_in_scores.copy()
    with pytest.raises(ValueError, match="scores must not overlap pos_emb"):
        table = table_in_scores.reshape(-1)[:42].reshape(7, 6)
        _core.cope(logits, q, table, table_in_scores, True, 1, True)
    np.testing.assert_array_equal(both, kept)
    np.testing.assert_array_equal(table_in_scores, kept_too)


# --- the backward's kernel ----------------------------------------------------


def _grad_both_paths(q, a, e, g, causal=True, q_offset=None):
    """(kernel, NumPy path) of the backward's (d_logits, d_query, d_table) of one call."""
    args = _args(q, a, e, causal, q_offset)
    got = _cope.grad_kernel(args, g)
    assert got is not None
    return got, _cope.grad_numpy(args, g)


@pytest.mark.parametrize("sizes", KERNEL_SIZES + [(1, 1, 1, 1, 1, 1)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_cope_grad_kernel_is_the_numpy_path_bit_for_bit(sizes, causal, dtype):
    # positions clipped (npos 1, 3, 4) and not (npos 16), q_len below, equal
    # to and above k_len, masked keys (-inf); the gradient of each dtype
    q, a, e = (x.astype(dtype) for x in _inputs(*sizes, seed=41, scale=3.0))
    rng = np.random.default_rng(42)
    a[rng.random(a.shape) < 0.2] = -np.inf
    for gdt in ["float16", "float32", "float64"]:
        g = rng.normal(size=a.shape).astype(gdt)
        for got, want in zip(*_grad_both_paths(q, a, e, g, causal=causal)):
            _same_bits(got, want)


@pytest.mark.parametrize("q_offset", [-9, -2, 0, 1, 4, 30])
def test_cope_grad_kernel_q_offset_is_the_numpy_path(q_offset):
    # offsets that hide every key, some, or none of them
    q, a, e = _inputs(2, 2, 5, 8, 3, 6, seed=43)
    g = np.random.default_rng(44).normal(size=a.shape).astype(np.float32)
    for got, want in zip(*_grad_both_paths(q, a, e, g, q_offset=q_offset)):
        _same_bits(got, want)


def test_cope_grad_kernel_extreme_logits_and_strided_inputs_are_the_numpy_path():
    # logits whose gates round to 1 or underflow, +-0, tiny ones, a whole
    # row masked; 5-D and strided logits and gradient, the table in the
    # authors' layout
    values = [-np.inf, -0.0, 0.0, 745.0, -745.0, 40.0, -40.0, 1e-300, -1e-300, 36.7, -709.5, 3.0]
    rng = np.random.default_rng(45)
    a = rng.choice(values, size=(2, 3, 6, 24))[..., ::2]
    a[0, 1, 2] = -np.inf
    q, _, e = _inputs(2, 3, 6, 12, 4, 5, seed=46)
    g = rng.normal(size=(2, 3, 6, 24))[..., 1::2]
    shape5 = (2, 3, 1, 6)
    for causal in (True, False):
        for got, want in zip(*_grad_both_paths(q, a, e.T[None], g, causal=causal)):
            _same_bits(got, want)
        both = _grad_both_paths(
            q.reshape(shape5 + (4,)), a.reshape(shape5 + (12,)), e, g.reshape(shape5 + (12,)),
            causal=causal,
        )  # fmt: skip
        for got, want in zip(*both):
            _same_bits(got, want)


def test_cope_grad_takes_the_kernel_and_gives_the_numpy_path_s_gradients():
    # in either layout of the table, and in float32 (the table's gradient
    # rounded once from float64)
    q, a, e = _inputs(2, 3, 4, 6, 5, 4, seed=47)
    g = np.random.default_rng(48).normal(size=a.shape)
    for dtype in ("float64", "float32"):
        q, a, e, g = (x.astype(dtype) for x in (q, a, e, g))
        want_a, want_q, want_e = _cope.grad_numpy(_args(q, a, e), g)
        d_q, d_a, d_e = cope_bias_grad(q, a, e, g)
        _same_bits(d_q, want_q)
        _same_bits(d_a, want_a)
        _same_bits(d_e, want_e.astype(dtype))
        _, _, d_e = cope_bias_grad(q, a, e.T[None], g)
        _same_bits(d_e, want_e.T[None].astype(dtype))


def test_cope_grad_sums_of_the_queries_and_table_stop_at_each_row_s_last_position():
    # the gradient of z is 0 past each row's largest position (its first
    # key's ceil): the sums up to there are the whole products, the
    # queries' and the table's, up to their rounding
    q, a, e = _inputs(2, 2, 9, 9, 3, 12, seed=53)
    g = np.random.default_rng(54).normal(size=a.shape)
    args = _args(q, a, e)
    sig, pos, lo, hi, w, _, _, _ = _cope.forward(args)
    rows, npos = 2 * 2 * 9, 12
    dz = np.zeros((rows * npos,))
    base = np.arange(rows)[:, None] * npos
    np.add.at(dz, (base + hi.reshape(rows, -1)).ravel(), (g * w).ravel())
    np.add.at(dz, (base + lo.reshape(rows, -1)).ravel(), (g * (1 - w)).ravel())
    dz = dz.reshape(rows, npos)
    pmax = hi.reshape(rows, -1)[:, 0]
    assert pmax.max() < npos - 1  # (no row reaches the last positions here)
    assert np.all(dz[np.arange(npos)[None, :] > pmax[:, None]] == 0.0)
    _, d_q, d_t = _cope.grad_numpy(args, g)
    np.testing.assert_allclose(d_q.reshape(rows, 3), dz @ e, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(d_t, dz.T @ q.reshape(rows, 3), rtol=1e-12, atol=1e-13)


def test_cope_grad_kernel_one_and_two_threads_give_the_same_bits():
    import posenc

    # 2 * 64 * 300 elements: above the size from which the kernel uses its threads
    q, a, e = _inputs(1, 2, 64, 300, 4, 40, seed=49, scale=1.0)
    g = np.random.default_rng(50).normal(size=a.shape).astype(np.float32)
    before = posenc.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            posenc.set_num_threads(n)
            results.append(_grad_both_paths(q, a, e, g))
    finally:
        posenc.set_num_threads(before)
    for got, want in results:
        for x, y in zip(got, want):
            _same_bits(x, y)


COPE_GRAD_BITS = """
import hashlib
import numpy as np
import posenc
from posenc import _cope
digest = hashlib.sha256()
rng = np.random.default_rng(51)
q, a, e = rng.normal(size=(2, 3, 9, 5)), rng.normal(size=(2, 3, 9, 21)) * 3, rng.normal(size=(7, 5))
a[rng.random(a.shape) < 0.2] = -np.inf
for dt in ["float16", "float32", "float64"]:
    for causal in (True, False):
        args = _cope.Args(q.astype(dt), a.astype(dt), e.astype(dt), causal, None)
        for part in _cope.grad_kernel(args, rng.normal(size=a.shape).astype(dt)):
            digest.update(part.tobytes())
print(posenc.simd_path(), digest.hexdigest())
"""


def test_cope_grad_kernel_portable_path_in_a_child_gives_the_same_bits():
    import child_process

    child_process.assert_every_path_gives_the_same_bits(COPE_GRAD_BITS)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_cope_grad_refuses_nan_logits_and_a_gradient_not_finite(dtype):
    # anywhere: a key after the query too (whose logit the backward does not
    # otherwise read), as the forward refuses them
    q, a, e = (x.astype(dtype) for x in _inputs(2, 2, 4, 5, 3, 4, seed=55))
    g = np.ones(a.shape, dtype)
    for value in (math.nan, math.inf):
        for at in ((0, 0, 0, 0), (1, 1, 0, 4)):
            bad = a.copy()
            bad[at] = value
            with pytest.raises(ValueError, match="attn_logits must be finite or -inf"):
                cope_bias_grad(q, bad, e, g)
    for value in (math.nan, math.inf, -math.inf):
        bad = g.copy()
        bad[1, 0, 3, 4] = value
        with pytest.raises(ValueError, match="grad must be finite"):
            cope_bias_grad(q, a, e, bad)
    a[0, 1, 2, 3] = -math.inf  # a masked key: read as a gate of 0
    cope_bias_grad(q, a, e, g)


def test_cope_grad_core_refuses_bad_arguments():
    from posenc import _core

    rng = np.random.default_rng(52)
    logits, grad = rng.normal(size=(12, 5)), rng.normal(size=(12, 5)).astype(np.float32)
    q, et = rng.normal(size=(12, 3)), rng.normal(size=(3, 6))
    table = np.ascontiguousarray(et.T)
    d_logits, d_query, d_table = np.empty((12, 5)), np.empty((12, 3)), np.empty((6, 3))

    def call(a=logits, g=grad, query=q, e_t=et, e=table, out=d_logits, dq=d_query, dt=d_table,
             q_len=4, offset=1):  # fmt: skip
        return lambda: _core.cope_grad(a, g, query, e_t, e, out, dq, dt, q_len, True, offset)

    for fn, exc, match in [
        (call(a=logits.astype(np.int32)), TypeError, "attn_logits"),
        (call(g=grad[:11]), ValueError, "grad"),
        (call(g=grad.tolist()), TypeError, "grad"),
        (call(query=q[:, :0], e_t=et[:0], e=table[:, :0]), ValueError, "query"),
        (call(query=q[:11]), ValueError, "query"),
        (call(e_t=et.astype(np.float32)), TypeError, "pos_emb"),
        (call(e_t=et[:2]), ValueError, "pos_emb"),
        (call(e=table[:5]), ValueError, "table"),
        (call(e=np.asfortranarray(table)), ValueError, "table"),
        (call(out=d_logits[:, :4]), ValueError, "d_logits"),
        (call(dq=d_query[:11]), ValueError, "d_query"),
        (call(dq=d_query.astype(np.int32)), TypeError, "d_query"),
        (call(dt=d_table[:5]), ValueError, "d_table"),
        (call(dt=np.empty((6, 3), np.float32)), TypeError, "d_table"),
        (call(q_len=5), ValueError, "q_len"),
        (call(q_len=0), ValueError, "q_len"),
        (call(offset=6), ValueError, "q_offset"),
        (call(offset=-5), ValueError, "q_offset"),
        (call(out=logits), ValueError, "d_logits"),
        (call(a=np.where(np.eye(12, 5) > 0, np.nan, logits)), ValueError, "attn_logits"),
        (call(a=np.where(np.eye(12, 5) > 0, np.inf, logits)), ValueError, "attn_logits"),
        (call(g=np.where(np.eye(12, 5) > 0, -np.inf, grad)), ValueError, "grad must be finite"),
    ]:
        with pytest.raises(exc, match=match):
            fn()
    # outputs sharing bytes with an input or with each other
    both = np.empty((12, 8))
    with pytest.raises(ValueError, match="d_query must not overlap d_logits"):
        call(out=both[:, :5], dq=both[:, 5:])()
    rows = rng.normal(size=(8, 3))
    with pytest.raises(ValueError, match="d_table must not overlap table"):
        call(e=rows[2:], dt=rows[:6])()
    call()()  # the same, apart
