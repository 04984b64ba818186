"""posenc with PyTorch tensors: types, devices, dtypes, autograd, torch.compile.

The witnesses are NumPy float64 formulas written here, posenc.reference, and
transformers' own functions (Llama's rotary embedding, GPT-J's interleaved
rotation, T5Attention.compute_bias), with autograd through them for the
gradients.  torch and transformers are required under
POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it) and the tests are skipped
without them otherwise, as the conformance tests are.
"""

import inspect
import os
import textwrap

import child_process
import numpy as np
import pytest
from optional import require
from t5_models import t5_attention
from tiny_models import LLAMA3_ROPE

import posenc
from posenc import _interop, reference
from posenc._options import config_text

torch = require("torch")

from posenc import _torch as pt  # noqa: E402  (imports torch)


@pytest.fixture(scope="module")
def transformers():
    return require("transformers")


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def rope64(x, positions, *, base=10000.0, layout="half", rotary_dim=None, inverse=False):
    """The rotation in float64, written out: x (..., dim) float64 NumPy,
    positions broadcasting against x.shape[:-1]."""
    x = np.asarray(x, dtype=np.float64)
    dim = x.shape[-1]
    r = rotary_dim or dim
    inv = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    angle = np.asarray(positions, dtype=np.float64)[..., None] * inv
    if inverse:
        angle = -angle
    c, s = np.cos(angle), np.sin(angle)
    out = x.copy()
    if layout == "half":
        a, b = x[..., : r // 2], x[..., r // 2 : r]
        out[..., : r // 2] = a * c - b * s
        out[..., r // 2 : r] = b * c + a * s
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = a * c - b * s
        out[..., 1:r:2] = b * c + a * s
    return out


def bf16_round(values):
    """float64 values rounded once to the nearest bfloat16 (ties to even), as float64."""
    v = np.asarray(values, dtype=np.float64)
    m, e = np.frexp(v)
    return np.ldexp(np.round(m * 256.0) / 256.0, e)


def bf16_ulp(values):
    v = np.abs(np.asarray(values, dtype=np.float64))
    _, e = np.frexp(np.maximum(v, 2.0**-126))
    return np.ldexp(1.0, e - 8)


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


# ---------------------------------------------------------------- same type out as in


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_tensor_in_tensor_out_with_the_numbers_of_the_float64_formula(dtype, layout):
    x = randn(2, 3, 17, 16, dtype=dtype)
    ids = torch.tensor([[0, 0, 0] + list(range(14)), list(range(100, 117))])  # (batch, seq)
    y = posenc.apply_rope(x, ids, layout=layout)
    assert type(y) is torch.Tensor and y.dtype == dtype and y.shape == x.shape
    assert y.device.type == "cpu"
    exact = rope64(x.double().numpy(), ids.numpy()[:, None, :], layout=layout)
    tol = {torch.float16: 2e-3, torch.float32: 2e-6, torch.float64: 1e-12}[dtype]
    np.testing.assert_allclose(y.double().numpy(), exact, rtol=0, atol=tol * 4)
    assert torch.equal(x, randn(2, 3, 17, 16, dtype=dtype))  # the input is left as it was


def test_the_tensor_is_read_where_it_is_and_the_result_shares_numpys_memory():
    x = randn(2, 8, 6, 32)
    arr = pt.array(x, "x")
    assert arr.__array_interface__["data"][0] == x.data_ptr()
    view = x.transpose(1, 2)  # strided: still no copy
    assert pt.array(view, "x").__array_interface__["data"][0] == view.data_ptr()
    result = np.ones((3, 4), np.float32)
    t = pt.tensor(result)
    assert t.data_ptr() == result.__array_interface__["data"][0]
    bf = x.to(torch.bfloat16)
    assert pt.array(bf, "x").__array_interface__["data"][0] == bf.data_ptr()


def test_strided_tensors_give_the_numbers_of_contiguous_ones():
    x = randn(2, 6, 8, 32)  # (batch, seq, heads, dim)
    view = x.transpose(1, 2)  # (batch, heads, seq, dim), not contiguous
    assert not view.is_contiguous()
    np.testing.assert_array_equal(
        posenc.apply_rope(view, offset=5).numpy(), posenc.apply_rope(view.contiguous(), offset=5)
    )
    np.testing.assert_array_equal(
        posenc.apply_rope(x, offset=5, seq_axis=-3).transpose(1, 2).numpy(),
        posenc.apply_rope(view, offset=5).numpy(),
    )


def test_every_function_gives_tensors_for_tensors():
    table = randn(32, 4)
    assert posenc.t5_bias(table, 3, 5).dtype == torch.float32
    np.testing.assert_array_equal(
        posenc.t5_bias(table, 3, 5).numpy(), reference.t5_bias(table.numpy(), 3, 5)
    )
    buckets = posenc.relative_position_bucket(torch.arange(-300, 300))
    assert buckets.dtype == torch.int64
    np.testing.assert_array_equal(
        buckets.numpy(), reference.relative_position_bucket(np.arange(-300, 300))
    )
    table = posenc.sinusoid(torch.arange(6), 8)
    assert table.dtype == torch.float32
    np.testing.assert_allclose(
        table.numpy(), reference.sinusoid(6, 8, dtype="float64"), rtol=0, atol=1e-7
    )
    cos, sin = posenc.rope_cos_sin(torch.tensor([3, 1, 4]), 8)
    assert cos.dtype == sin.dtype == torch.float32
    angle = np.array([3, 1, 4])[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(cos.numpy(), np.cos(np.tile(angle, 2)), rtol=0, atol=1e-7)
    np.testing.assert_allclose(sin.numpy(), np.sin(np.tile(angle, 2)), rtol=0, atol=1e-7)
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    bias = posenc.alibi_bias(2, 3, slopes=slopes)
    np.testing.assert_array_equal(
        bias.numpy(), reference.alibi_bias(2, 3, slopes=np.array([0.5, 0.25]))
    )


def test_table_functions_return_tensors_for_a_torch_dtype_or_a_device():
    for call in [
        lambda: posenc.sinusoid(8, 4, dtype=torch.float64),
        lambda: posenc.sinusoid(8, 4, device="cpu"),
        lambda: posenc.alibi_bias(4, 3, 5, dtype=torch.float16),
        lambda: posenc.alibi_slopes(6, device=torch.device("cpu")),
        lambda: posenc.relative_positions(3, 4, device="cpu"),
        lambda: posenc.rope_cos_sin(8, 16, dtype=torch.float32)[0],
        lambda: posenc.rope_frequencies(16, device="cpu")[0],
    ]:
        assert type(call()) is torch.Tensor
    assert posenc.sinusoid(8, 4, dtype=torch.float64).dtype == torch.float64
    np.testing.assert_array_equal(
        posenc.sinusoid(8, 4, dtype=torch.float64).numpy(), posenc.sinusoid(8, 4, dtype="float64")
    )
    np.testing.assert_array_equal(
        posenc.alibi_slopes(6, device="cpu").numpy(), reference.alibi_slopes(6)
    )
    inv_freq, factor = posenc.rope_frequencies(16, device="cpu")
    assert inv_freq.dtype == torch.float64 and factor == 1.0
    np.testing.assert_allclose(inv_freq.numpy(), 10000.0 ** (-np.arange(0, 16, 2) / 16), rtol=1e-15)
    # the NumPy path is as it was: device=None changes nothing
    assert type(posenc.sinusoid(8, 4, device=None)) is np.ndarray


def test_integer_position_tensors_and_0d_lengths_work_as_numpy_ones():
    x = randn(2, 4, 5, 8)
    ids = torch.tensor([[4, 3, 2, 1, 0], [7, 8, 9, 10, 11]], dtype=torch.int64)
    np.testing.assert_array_equal(
        posenc.apply_rope(x, ids).numpy(), posenc.apply_rope(x.numpy(), ids.numpy())
    )
    np.testing.assert_array_equal(
        posenc.apply_rope(x, torch.tensor(7)).numpy(), posenc.apply_rope(x.numpy(), np.array(7))
    )
    assert posenc.sinusoid(torch.tensor(8), 4).shape == (8, 4)
    assert posenc.sinusoid(torch.tensor(2.5), 4).shape == (4,)
    assert posenc.alibi_bias(torch.tensor(4), torch.tensor(3), torch.tensor(6)).shape == (4, 3, 6)
    assert posenc.t5_bias(randn(32, 2), torch.tensor(3), q_offset=torch.tensor(2)).shape == (
        2,
        3,
        3,
    )
    np.testing.assert_array_equal(
        posenc.t5_bias(randn(32, 2), torch.tensor(3), q_offset=torch.tensor(2)).numpy(),
        reference.t5_bias(randn(32, 2).numpy(), 3, q_offset=2),
    )
    with pytest.raises(TypeError, match="q_len"):
        posenc.alibi_bias(4, torch.tensor(True))


# ---------------------------------------------------------------- out= and scores=


def test_out_tensors_are_written_in_place_and_returned():
    x = randn(1, 4, 6, 16)
    out = torch.empty_like(x)
    version = out._version
    result = posenc.apply_rope(x, offset=9, out=out)
    assert result is out and out._version > version
    np.testing.assert_allclose(
        out.double().numpy(), rope64(x.double().numpy(), 9 + np.arange(6)), atol=2e-6
    )
    y = x.clone()
    assert posenc.apply_rope(y, offset=9, out=y) is y
    assert torch.equal(y, out)
    strided = torch.empty(1, 6, 4, 16).transpose(1, 2)  # not contiguous
    assert posenc.apply_rope(x, offset=9, out=strided) is strided
    assert torch.equal(strided, out)
    table = torch.empty(8, 4, dtype=torch.float64)
    assert posenc.sinusoid(8, 4, out=table) is table
    np.testing.assert_array_equal(table.numpy(), posenc.sinusoid(8, 4, dtype="float64"))


def test_scores_tensors_receive_the_bias_in_place():
    scores = randn(2, 4, 3, 7)
    before = scores.clone()
    version = scores._version
    assert posenc.alibi_bias(4, 3, 7, scores=scores) is scores
    assert scores._version > version
    np.testing.assert_array_equal(
        scores.numpy(), before.numpy() + reference.alibi_bias(4, 3, 7).astype(np.float32)
    )
    table = randn(32, 4, seed=1)
    scores = before.clone()
    assert posenc.t5_bias(table, 3, 7, scores=scores) is scores
    np.testing.assert_array_equal(
        scores.numpy(), before.numpy() + reference.t5_bias(table.numpy(), 3, 7)
    )


def test_a_tensor_saved_for_backward_and_then_written_in_place_is_caught_by_autograd():
    # the direct path bumps the version counter as torch's in-place ops do,
    # so a backward that needs the old values refuses to run
    w = torch.ones(1, 2, 3, 8, requires_grad=True)
    x = randn(1, 2, 3, 8)
    y = (x * w).sum()  # saves x for the gradient of w
    posenc.apply_rope(x, out=x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    scores = randn(1, 2, 3, 3)
    loss = (scores * w[..., :3]).sum()
    posenc.alibi_bias(2, 3, scores=scores)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_inference_tensors_are_written_only_in_inference_mode():
    with torch.inference_mode():
        x = randn(1, 2, 3, 8).clone()
        assert posenc.apply_rope(x, out=x) is x  # allowed there
    before = x.clone()
    with pytest.raises(ValueError, match="inference tensor"):
        posenc.apply_rope(x, out=x)
    assert torch.equal(x, before)


def test_bad_out_and_scores_raise_naming_them_and_leave_the_tensors_untouched():
    x = randn(1, 2, 3, 8)
    for out, error, match in [
        (torch.zeros(1, 2, 3, 8, dtype=torch.float64), TypeError, "out must have dtype"),
        (torch.zeros(1, 2, 3, 6), ValueError, "out must have shape"),
    ]:
        before = out.clone()
        with pytest.raises(error, match=match):
            posenc.apply_rope(x, out=out)
        assert torch.equal(out, before)
    scores = torch.zeros(2, 4, 3, 5)
    with pytest.raises(ValueError, match="scores must have shape"):
        posenc.alibi_bias(4, 3, 6, scores=scores)
    with pytest.raises(TypeError, match="scores must have dtype"):
        posenc.t5_bias(randn(32, 4), 3, 5, scores=torch.zeros(2, 4, 3, 5, dtype=torch.int32))
    assert not scores.any()


# ---------------------------------------------------------------- devices


@pytest.mark.parametrize(
    "name, call",
    [
        ("x", lambda: posenc.apply_rope(meta(1, 2, 3, 8))),
        ("positions", lambda: posenc.apply_rope(randn(1, 2, 3, 8), meta(3, dtype=torch.int64))),
        ("positions", lambda: posenc.sinusoid(meta(5), 8)),
        ("positions", lambda: posenc.sinusoid(meta((), dtype=torch.int64), 8)),
        ("table", lambda: posenc.t5_bias(meta(32, 4), 3)),
        ("slopes", lambda: posenc.alibi_bias(2, 3, slopes=meta(2))),
        ("relative_position", lambda: posenc.relative_position_bucket(meta(4, dtype=torch.int64))),
    ],
)
def test_tensors_on_another_device_are_refused_naming_the_argument_and_device(name, call):
    with pytest.raises(TypeError, match=rf"^{name} is on device meta: posenc computes on the CPU"):
        call()


def test_out_and_scores_on_another_device_are_refused_and_cpu_tensors_left_untouched():
    x = randn(1, 2, 3, 8)
    before = x.clone()
    with pytest.raises(TypeError, match="^out is on device meta"):
        posenc.apply_rope(x, out=meta(1, 2, 3, 8))
    with pytest.raises(TypeError, match="^scores is on device meta"):
        posenc.alibi_bias(2, 3, scores=meta(1, 2, 3, 3))
    out = torch.zeros(1, 2, 3, 8)
    with pytest.raises(TypeError, match="^x is on device meta"):
        posenc.apply_rope(meta(1, 2, 3, 8), out=out)
    assert not out.any() and torch.equal(x, before)
    # with autograd recording the call, too
    xg = randn(1, 2, 3, 8).requires_grad_()
    with pytest.raises(TypeError, match="^out is on device meta"):
        posenc.apply_rope(xg, out=meta(1, 2, 3, 8))


@pytest.mark.parametrize("device", ["meta", "cuda", torch.device("meta"), "cuda:1"])
def test_device_other_than_cpu_is_refused_for_tables(device):
    with pytest.raises(TypeError, match="^device = .*posenc computes on the CPU"):
        posenc.sinusoid(8, 4, device=device)
    with pytest.raises(TypeError, match="^device = "):
        posenc.apply_rope(randn(1, 1, 2, 4), device=device)


def test_device_that_is_no_device_is_refused():
    with pytest.raises(TypeError, match="^device must be a torch.device"):
        posenc.sinusoid(8, 4, device="gpu please")
    with pytest.raises(TypeError, match="^device must be a torch.device"):
        posenc.sinusoid(8, 4, device=1.5)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "torch_dtype, name",
    [(torch.float16, "float16"), (torch.float32, "float32"), (torch.float64, "float64")],
)
def test_torch_dtypes_are_numpy_dtypes(torch_dtype, name):
    assert posenc.sinusoid(16, 8, dtype=torch_dtype).dtype == torch_dtype
    np.testing.assert_array_equal(
        posenc.sinusoid(16, 8, dtype=torch_dtype).numpy(), posenc.sinusoid(16, 8, dtype=name)
    )
    np.testing.assert_array_equal(
        posenc.alibi_bias(3, 4, dtype=torch_dtype).numpy(), posenc.alibi_bias(3, 4, dtype=name)
    )
    cos, _ = posenc.rope_cos_sin(9, 8, dtype=torch_dtype)
    np.testing.assert_array_equal(cos.numpy(), posenc.rope_cos_sin(9, 8, dtype=name)[0])


def test_dtypes_other_than_floats_are_refused_naming_dtype():
    with pytest.raises(TypeError, match="^dtype must be float16, bfloat16, float32 or float64"):
        posenc.sinusoid(8, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match="^dtype must be float16, bfloat16, float32 or float64"):
        posenc.sinusoid(8, 4, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="^x must have dtype"):
        posenc.apply_rope(torch.zeros(1, 2, 4, dtype=torch.int32))
    with pytest.raises(
        TypeError, match="^x: a tensor of dtype torch.float32 and layout torch.sparse"
    ):
        posenc.apply_rope(torch.zeros(3, 8).to_sparse())


def test_bfloat16_tables_are_the_float64_values_rounded_once():
    table = posenc.sinusoid(4096, 64, dtype=torch.bfloat16)
    assert table.dtype == torch.bfloat16
    exact = reference.sinusoid(4096, 64, dtype="float64")
    np.testing.assert_array_equal(table.double().numpy(), bf16_round(exact))
    assert torch.equal(posenc.sinusoid(4096, 64, dtype="bfloat16", device="cpu"), table)
    cos, sin = posenc.rope_cos_sin(torch.arange(0, 2**20, 97), 64, dtype=torch.bfloat16)
    angle = np.arange(0, 2**20, 97)[:, None] * 10000.0 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_array_equal(cos.double().numpy(), bf16_round(np.cos(np.tile(angle, 2))))
    np.testing.assert_array_equal(sin.double().numpy(), bf16_round(np.sin(np.tile(angle, 2))))


def test_bfloat16_apply_rope_is_within_one_rounding_of_the_float64_rotation_at_long_positions():
    x = randn(1, 4, 64, 64, dtype=torch.bfloat16)
    positions = torch.arange(2**20 - 64, 2**20)
    y = posenc.apply_rope(x, positions)
    assert y.dtype == torch.bfloat16
    exact = rope64(x.double().numpy(), positions.numpy())
    err = np.abs(y.double().numpy() - exact)
    assert (err <= bf16_ulp(exact)).all(), err.max()
    out = torch.empty_like(x)
    assert posenc.apply_rope(x, positions, out=out) is out and torch.equal(out, y)


def test_bfloat16_scores_receive_the_bias_rounded_then_added():
    scores = randn(2, 4, 5, 9, dtype=torch.bfloat16)
    expected = (
        scores.float()
        + torch.from_numpy(bf16_round(reference.alibi_bias(4, 5, 9, dtype="float64"))).float()
    )
    assert posenc.alibi_bias(4, 5, 9, scores=scores) is scores
    assert torch.equal(scores, expected.to(torch.bfloat16))


def test_bfloat16_tensors_need_no_ml_dtypes():
    code = (
        "import sys; sys.modules['ml_dtypes'] = None  # as if it were not installed\n"
        "import torch, posenc\n"
        "x = torch.randn(1, 2, 3, 8).to(torch.bfloat16)\n"
        "y = posenc.apply_rope(x, out=torch.empty_like(x))\n"
        "t = posenc.sinusoid(4, 8, dtype=torch.bfloat16)\n"
        "s = posenc.alibi_bias(2, 3, scores=torch.zeros(1, 2, 3, 3, dtype=torch.bfloat16))\n"
        "print(y.dtype, t.dtype, s.dtype)\n"
    )
    done = child_process.run("-c", code)
    assert done.stdout.split() == ["torch.bfloat16"] * 3, done.stdout + done.stderr


# ---------------------------------------------------------------- torch is not imported by posenc


def test_numpy_calls_do_not_import_torch():
    code = (
        "import sys, posenc, numpy as np\n"
        "posenc.sinusoid(8, 4); posenc.apply_rope(np.ones((1, 2, 3, 4)))\n"
        "posenc.t5_bias(np.ones((32, 2)), 3); posenc.sinusoid(8, 4, device=None)\n"
        "print('torch' in sys.modules)\n"
    )
    done = child_process.run("-c", code, check=True)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_a_torch_without_custom_operators_gets_an_error_that_says_what_to_do():
    code = (
        "import torch, posenc\n"
        "del torch.library.custom_op  # as in torch < 2.4\n"
        "try:\n"
        "    posenc.sinusoid(4, 8, dtype=torch.float32)\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = child_process.run("-c", code)
    assert "from torch 2.4 on" in done.stdout and "tensor.numpy()" in done.stdout, (
        done.stdout + done.stderr
    )


# ---------------------------------------------------------------- autograd


ROPE_CASES = {
    "default": {},
    "interleaved": {"layout": "interleaved"},
    "partial": {"rotary_dim": 4},
    "seq-axis": {"seq_axis": -3},
    "inverse": {"inverse": True, "offset": 3},
    "yarn": {
        "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    },
    "dynamic": {"scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4}},
}


@pytest.mark.parametrize("case", ROPE_CASES)
def test_apply_rope_passes_gradcheck_and_gradgradcheck(case):
    kwargs = ROPE_CASES[case]
    x = randn(2, 3, 5, 8, dtype=torch.float64).requires_grad_()
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 3, 9, 1, 2]])
    if kwargs.get("seq_axis") == -3:
        x = randn(2, 5, 3, 8, dtype=torch.float64).requires_grad_()

    def f(t):
        return posenc.apply_rope(t, positions, **kwargs)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_the_gradient_of_apply_rope_is_the_inverse_rotation():
    x = randn(1, 2, 6, 8, dtype=torch.float64).requires_grad_()
    g = randn(1, 2, 6, 8, dtype=torch.float64, seed=3)
    posenc.apply_rope(x, offset=11).backward(g)
    np.testing.assert_allclose(
        x.grad.numpy(), rope64(g.numpy(), 11 + np.arange(6), inverse=True), atol=1e-13
    )


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_passes_gradcheck_for_the_table(bidirectional):
    table = randn(16, 3, dtype=torch.float64).requires_grad_()

    def f(t):
        return posenc.t5_bias(t, 6, 40, bidirectional=bidirectional, max_distance=20, q_offset=3)

    assert torch.autograd.gradcheck(f, (table,))
    assert torch.autograd.gradgradcheck(f, (table,))


def test_t5_bias_table_gradient_sums_the_incoming_gradient_by_bucket():
    table = randn(32, 4, dtype=torch.float64).requires_grad_()
    g = randn(4, 7, 11, dtype=torch.float64, seed=5)
    posenc.t5_bias(table, 7, 11, q_offset=2).backward(g)
    rel = np.arange(11)[None, :] - (2 + np.arange(7))[:, None]
    buckets = reference.relative_position_bucket(rel)
    expected = np.zeros((32, 4))
    for h in range(4):
        np.add.at(expected[:, h], buckets, g[h].numpy())
    np.testing.assert_allclose(table.grad.numpy(), expected, rtol=1e-13, atol=1e-13)


def test_scores_get_the_incoming_gradient_unchanged_and_the_table_its_own():
    table = randn(32, 2, dtype=torch.float64).requires_grad_()
    scores = randn(3, 2, 4, 5, dtype=torch.float64).requires_grad_()

    def f(t, s):
        return posenc.t5_bias(t, 4, 5, scores=s.clone())

    assert torch.autograd.gradcheck(f, (table, scores))
    g = randn(3, 2, 4, 5, dtype=torch.float64, seed=9)
    f(table, scores).backward(g)
    assert torch.equal(scores.grad, g)
    s = scores.detach().clone().requires_grad_()
    posenc.alibi_bias(2, 4, 5, scores=s * 1.0).backward(g)
    assert torch.equal(s.grad, g)


def test_scores_in_float16_get_the_table_in_float16_as_numpy_does():
    table = randn(32, 2).requires_grad_()
    scores = randn(1, 2, 4, 5, dtype=torch.float16)
    result = posenc.t5_bias(table, 4, 5, scores=scores.clone())
    expected = scores.numpy() + reference.t5_bias(table.detach().numpy(), 4, 5).astype(np.float16)
    np.testing.assert_array_equal(result.detach().numpy(), expected)
    result.float().sum().backward()
    assert table.grad.dtype == torch.float32 and table.grad.abs().sum() > 0


# (function, shapes of its array arguments, options): terms with no queries
EMPTY_TERMS = {
    "xl_position_term q_len=0": (
        "xl_position_term",
        {"q": (2, 0, 4), "r": (2, 6, 4), "bias": (2, 4)},
        {"k_len": 3},
    ),
    "xl_position_term scores": (
        "xl_position_term",
        {"q": (1, 2, 0, 4), "r": (2, 6, 4), "scores": (3, 2, 0, 3)},
        {},
    ),
    "tener_position_term": (
        "tener_position_term",
        {"q": (2, 0, 4), "k": (2, 0, 4), "table": (4, 4), "v": (2, 4)},
        {},
    ),
    "tener_scores": ("tener_scores", {"q": (2, 0, 4), "k": (2, 0, 4), "table": (4, 4)}, {}),
    "deberta_attention_bias q_len=0": (
        "deberta_attention_bias",
        {"q": (2, 0, 4), "k": (2, 3, 4), "pos_key": (2, 4, 4), "pos_query": (2, 4, 4)},
        {"max_relative_positions": 2},
    ),
    "deberta_attention_bias k_len=0": (
        "deberta_attention_bias",
        {"q": (2, 3, 4), "k": (2, 0, 4), "pos_key": (2, 4, 4), "pos_query": (2, 4, 4)},
        {"max_relative_positions": 2},
    ),
    "shaw_key_term": (
        "shaw_key_term",
        {"q": (2, 0, 4), "rel_keys": (5, 4)},
        {"max_distance": 2, "k_len": 3},
    ),
}


@pytest.mark.parametrize("case", EMPTY_TERMS)
def test_empty_relative_terms_equal_numpys_and_get_zero_gradients(case):
    name, shapes, options = EMPTY_TERMS[case]
    fn = getattr(posenc, name)
    arrays = {
        key: randn(*shape, dtype=torch.float64, seed=i)
        for i, (key, shape) in enumerate(shapes.items())
    }
    want = fn(**{key: t.numpy().copy() for key, t in arrays.items()}, **options)
    leaves = {key: t.clone().requires_grad_() for key, t in arrays.items()}
    inputs = {key: t.clone() if key == "scores" else t for key, t in leaves.items()}
    got = fn(**inputs, **options)
    assert want.size == 0 and got.shape == want.shape and got.dtype == torch.float64
    grads = torch.autograd.grad(got.sum(), list(leaves.values()), allow_unused=True)
    for (key, leaf), g in zip(leaves.items(), grads):
        if key == "scores":
            assert g is not None and g.shape == leaf.shape  # the incoming gradient, empty
        else:
            assert g is not None and torch.equal(g, torch.zeros_like(leaf)), key


def test_positions_get_no_gradient():
    x = randn(1, 2, 4, 8).requires_grad_()
    positions = torch.tensor([0.0, 1.5, 2.0, 7.25], requires_grad=True)
    posenc.apply_rope(x, positions).sum().backward()
    assert positions.grad is None and x.grad is not None
    table = posenc.sinusoid(positions, 8)
    assert not table.requires_grad


def test_tensors_requiring_grad_that_posenc_does_not_differentiate_are_refused():
    slopes = torch.tensor([0.5, 0.25], requires_grad=True)
    with pytest.raises(TypeError, match="^slopes requires grad, and posenc.alibi_bias"):
        posenc.alibi_bias(2, 3, slopes=slopes)
    weight = randn(16, 8).requires_grad_()
    with pytest.raises(TypeError, match="^weight requires grad, and posenc.permute_rope_weight"):
        posenc.permute_rope_weight(weight, 2)
    with torch.no_grad():  # nothing recorded: read as it is
        assert posenc.alibi_bias(2, 3, slopes=slopes).shape == (2, 3, 3)
        np.testing.assert_array_equal(
            posenc.permute_rope_weight(weight, 2).numpy(),
            posenc.permute_rope_weight(weight.detach().numpy(), 2),
        )


# Integer arguments past int64 (2**70): on the NumPy path the function's own
# checks refuse them by name (or read them as reals); the torch autograd path
# (the operator, whose options are int64) raised torch's RuntimeError.  Each
# row: (function, positional args, keyword args, the argument that requires
# grad: a position or a name; "scores" a non-leaf copy), WIDE for the value.
WIDE = 2**70


def _f(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape) * 0.5 + 1.0


WIDE_ROWS = {
    "apply_rope rotary_dim": (posenc.apply_rope, (_f(1, 2, 3, 8),), dict(rotary_dim=WIDE), 0),
    "apply_rope seq_axis": (posenc.apply_rope, (_f(1, 2, 3, 8),), dict(seq_axis=WIDE), 0),
    "apply_rope offset": (posenc.apply_rope, (_f(1, 2, 3, 8),), dict(offset=WIDE), 0),
    "apply_rope base": (posenc.apply_rope, (_f(1, 2, 3, 8),), dict(base=WIDE), 0),
    "apply_rope scaling factor": (posenc.apply_rope, (_f(1, 2, 3, 8),),
                                  dict(scaling={"rope_type": "linear", "factor": WIDE}), 0),
    "alibi_bias q_len": (posenc.alibi_bias, (2, WIDE, 3), dict(scores=_f(2, 3, 3)), "scores"),
    "alibi_bias q_offset": (posenc.alibi_bias, (2, 3, 3),
                            dict(q_offset=WIDE, scores=_f(2, 3, 3)), "scores"),
    "t5_bias q_offset": (posenc.t5_bias, (_f(32, 2), 3, 3), dict(q_offset=WIDE), 0),
    "t5_bias q_offset uint64": (posenc.t5_bias, (_f(32, 2), 3, 3),
                                dict(q_offset=np.uint64(2**63)), 0),
    "t5_bias q_len": (posenc.t5_bias, (_f(32, 2), WIDE, 3), {}, 0),
    "t5_bias k_len": (posenc.t5_bias, (_f(32, 2), 3, WIDE), {}, 0),
    "t5_bias max_distance": (posenc.t5_bias, (_f(32, 2), 3, 3), dict(max_distance=WIDE), 0),
    "xl_position_term k_len": (posenc.xl_position_term, (_f(2, 3, 4), _f(2, 6, 4)),
                               dict(k_len=WIDE), 0),
    "xl_position_term q_offset": (posenc.xl_position_term, (_f(2, 3, 4), _f(2, 6, 4)),
                                  dict(q_offset=WIDE), 0),
    "deberta q_offset": (posenc.deberta_attention_bias, (_f(2, 3, 4), _f(2, 3, 4), _f(2, 4, 4)),
                         dict(max_relative_positions=2, q_offset=WIDE), 0),
    "deberta max_relative_positions": (
        posenc.deberta_attention_bias, (_f(2, 3, 4), _f(2, 3, 4), _f(2, 4, 4)),
        dict(max_relative_positions=WIDE), 0),
    "deberta position_buckets": (
        posenc.deberta_attention_bias, (_f(2, 3, 4), _f(2, 3, 4), _f(2, 4, 4)),
        dict(position_buckets=WIDE), 0),
    "deberta scale_factor": (posenc.deberta_attention_bias, (_f(2, 3, 4), _f(2, 3, 4),
                             _f(2, 4, 4)), dict(max_relative_positions=2, scale_factor=WIDE), 0),
    "shaw_key_term max_distance": (posenc.shaw_key_term, (_f(2, 3, 4), _f(5, 4)),
                                   dict(max_distance=WIDE), 0),
    "shaw_key_term q_offset": (posenc.shaw_key_term, (_f(2, 3, 4), _f(5, 4)),
                               dict(max_distance=2, q_offset=WIDE), 0),
    "shaw_value_term q_offset": (posenc.shaw_value_term, (_f(2, 3, 3), _f(5, 4)),
                                 dict(max_distance=2, q_offset=WIDE), 0),
    "tupe_bias max_distance": (posenc.tupe_bias, (_f(2, 3, 4), _f(2, 3, 4)),
                               dict(rel_table=_f(8, 2), max_distance=WIDE), 0),
    "kerple_bias q_len": (posenc.kerple_bias, (_f(2), _f(2), WIDE), {}, 0),
    "kerple_bias q_offset": (posenc.kerple_bias, (_f(2), _f(2), 3), dict(q_offset=WIDE), 0),
    "sandwich_bias dim": (posenc.sandwich_bias, (2, 3), dict(dim=WIDE, scores=_f(2, 3, 3)),
                          "scores"),
    "sandwich_bias q_offset": (posenc.sandwich_bias, (2, 3),
                               dict(dim=8, q_offset=WIDE, scores=_f(2, 3, 3)), "scores"),
    "fire_bias q_offset": (posenc.fire_bias, (_f(4, 1), _f(4), _f(2, 4), _f(2), 0.5, 2.0, 3),
                           dict(q_offset=WIDE), 0),
    "fire_bias eps": (posenc.fire_bias, (_f(4, 1), _f(4), _f(2, 4), _f(2), 0.5, 2.0, 3),
                      dict(eps=WIDE), 0),
    "cope_bias q_offset": (posenc.cope_bias, (_f(2, 4, 3), _f(2, 4, 5), _f(6, 3)),
                           dict(q_offset=WIDE), 0),
}  # fmt: skip


def _outcome(call):
    try:
        result = call()
    except Exception as exc:  # the type and message are compared
        return type(exc), str(exc)
    return None, result


@pytest.mark.parametrize("row", sorted(WIDE_ROWS))
def test_ints_past_int64_give_the_numpy_paths_outcome_on_the_autograd_path(row):
    fn, args, kwargs, grad = WIDE_ROWS[row]
    exc, want = _outcome(lambda: fn(*args, **kwargs))
    t_args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    t_kwargs = {k: torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                for k, a in kwargs.items()}  # fmt: skip
    if grad == "scores":
        t_kwargs["scores"] = t_kwargs["scores"].requires_grad_().clone()
    else:
        t_args[grad].requires_grad_()
    got_exc, got = _outcome(lambda: fn(*t_args, **t_kwargs))
    assert got_exc is exc, (row, got)
    if exc is None:  # a real read as the float it is, both ways
        torch.testing.assert_close(got.detach(), torch.from_numpy(want), rtol=0, atol=0)
        got.sum().backward()
    else:
        assert exc in (TypeError, ValueError) and got == want, row


# (argument, function, its value, the call): each function's tensor argument
# inside a torch.func transform
_R, _K, _P = (
    randn(*shape, dtype=torch.float64, seed=3) for shape in [(2, 6, 4), (1, 2, 3, 4), (2, 4, 4)]
)
FUNC_ROWS = [
    ("x", "apply_rope", randn(1, 2, 3, 4, dtype=torch.float64), lambda a: posenc.apply_rope(a)),
    ("table", "t5_bias", randn(32, 2, dtype=torch.float64), lambda a: posenc.t5_bias(a, 3)),
    (
        "q",
        "xl_position_term",
        randn(1, 2, 3, 4, dtype=torch.float64),
        lambda a: posenc.xl_position_term(a, _R),
    ),
    (
        "q",
        "deberta_attention_bias",
        randn(1, 2, 3, 4, dtype=torch.float64),
        lambda a: posenc.deberta_attention_bias(a, _K, _P, max_relative_positions=2),
    ),
    ("positions", "sinusoid", torch.arange(3.0), lambda a: posenc.sinusoid(a, 8)),
    ("positions", "rope_cos_sin", torch.arange(3.0), lambda a: posenc.rope_cos_sin(a, 8)[0]),
]

FUNC_TRANSFORMS = {
    "grad": lambda f, a: torch.func.grad(lambda t: f(t).sum())(a),
    "vmap": lambda f, a: torch.func.vmap(f)(torch.stack([a, a])),
    "jacrev": lambda f, a: torch.func.jacrev(f)(a),
    "jvp": lambda f, a: torch.func.jvp(f, (a,), (a,)),
}


@pytest.mark.parametrize("transform", FUNC_TRANSFORMS)
@pytest.mark.parametrize(
    "name, function, value, call", FUNC_ROWS, ids=[f"{r[1]}-{r[0]}" for r in FUNC_ROWS]
)
def test_torch_func_transforms_are_refused_naming_the_argument(
    name, function, value, call, transform
):
    with pytest.raises(
        TypeError,
        match=rf"^{name} is read inside a torch.func transform .*posenc\.{function} does not "
        r"support: for gradients use torch.autograd",
    ):
        FUNC_TRANSFORMS[transform](call, value)
    # torch.autograd, as the message says, gives the gradient
    if transform == "grad" and name != "positions":
        leaf = value.clone().requires_grad_()
        (got,) = torch.autograd.grad(call(leaf).sum(), leaf)
        assert got.shape == value.shape and torch.isfinite(got).all()


def test_writing_into_scores_inside_torch_func_grad_is_torchs_own_add():
    # alibi_bias's scores= is torch's in-place add: the transform follows it
    got = torch.func.grad(lambda s: posenc.alibi_bias(2, 3, scores=s.clone()).pow(2).sum())(
        torch.ones(2, 3, 3, dtype=torch.float64)
    )
    want = 2 * (1 + torch.from_numpy(reference.alibi_bias(2, 3, dtype=np.float64)))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_out_with_autograd_is_torchs_in_place_copy():
    w = randn(1, 2, 3, 8, dtype=torch.float64).requires_grad_()
    x = w * 2.0  # not a leaf
    y = x * 1.0
    result = posenc.apply_rope(x, offset=4, out=y)
    assert result is y and y.grad_fn is not None
    g = randn(1, 2, 3, 8, dtype=torch.float64, seed=1)
    y.backward(g)
    expected = 2.0 * rope64(g.numpy(), 4 + np.arange(3), inverse=True)
    np.testing.assert_allclose(w.grad.numpy(), expected, atol=1e-13)
    # in place, out=x, as well
    w.grad = None
    x = w * 2.0
    posenc.apply_rope(x, offset=4, out=x).backward(g)
    np.testing.assert_allclose(w.grad.numpy(), expected, atol=1e-13)
    # a leaf that requires grad cannot be written in place while grad mode is on
    leaf = randn(1, 2, 3, 8).requires_grad_()
    before = leaf.detach().clone()
    with pytest.raises(ValueError, match="^out is a leaf tensor that requires grad"):
        posenc.apply_rope(randn(1, 2, 3, 8), out=leaf)
    with pytest.raises(ValueError, match="^scores is a leaf tensor that requires grad"):
        posenc.alibi_bias(2, 3, 8, scores=leaf)
    assert torch.equal(leaf.detach(), before)
    with torch.no_grad():  # as torch allows
        assert posenc.apply_rope(randn(1, 2, 3, 8), out=leaf) is leaf


def test_llama_rotation_and_its_gradient_equal_transformers_in_float32(transformers):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    rotary = LlamaRotaryEmbedding(config)
    position_ids = torch.tensor([[0, 0, 0, 0, 1, 2, 3, 4, 5, 6], list(range(40, 50))])
    q0 = randn(2, 4, 10, 64)
    w = randn(2, 4, 10, 64, seed=7)

    q = q0.clone().requires_grad_()
    cos, sin = rotary(q, position_ids)
    theirs, _ = apply_rotary_pos_emb(q, q, cos, sin)
    (theirs * w).sum().backward()

    p = q0.clone().requires_grad_()
    ours = posenc.apply_rope(p, position_ids, scaling=config)
    (ours * w).sum().backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5)
    torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=2e-5)


def test_gptj_interleaved_rotation_and_its_gradient_equal_transformers_in_float32(transformers):
    from transformers.models.gptj import modeling_gptj as gptj

    rotary_dim = 16
    position_ids = torch.tensor([list(range(12)), list(range(30, 42))])
    x0 = randn(2, 12, 3, 32)  # (batch, seq, heads, head_dim)
    w = randn(2, 12, 3, 32, seed=2)

    x = x0.clone().requires_grad_()
    sincos = gptj.create_sinusoidal_positions(64, rotary_dim)[position_ids]
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    rotated = gptj.apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos)
    theirs = torch.cat([rotated, x[..., rotary_dim:]], dim=-1)
    (theirs * w).sum().backward()

    p = x0.clone().requires_grad_()
    ours = posenc.apply_rope(
        p, position_ids, layout="interleaved", rotary_dim=rotary_dim, seq_axis=-3
    )
    (ours * w).sum().backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5)
    torch.testing.assert_close(p.grad, x.grad, rtol=0, atol=2e-5)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_bias_and_its_table_gradient_equal_t5_attentions_in_float32(transformers, is_decoder):
    attention = t5_attention(torch, is_decoder)  # 4 heads, 32 buckets up to 128
    q_len, k_len, past = 9, 300, 291
    w = randn(1, 4, q_len, k_len, seed=4)
    theirs = attention.compute_bias(q_len, k_len, past_seen_tokens=past)
    (theirs * w).sum().backward()

    table = attention.relative_attention_bias.weight.detach().clone().requires_grad_()
    ours = posenc.t5_bias(table, q_len, k_len, bidirectional=not is_decoder, q_offset=past)
    (ours * w[0]).sum().backward()

    torch.testing.assert_close(ours, theirs[0], rtol=0, atol=0)
    torch.testing.assert_close(
        table.grad, attention.relative_attention_bias.weight.grad, rtol=1e-5, atol=1e-4
    )


# ---------------------------------------------------------------- the operators


def _options(**kwargs):
    return pt.encode(kwargs)


def test_the_operators_pass_torchs_opcheck():
    x = randn(2, 3, 5, 8, dtype=torch.float64).requires_grad_()
    rope = dict(base=10000.0, layout="half", rotary_dim=None, offset=3, seq_axis=-2,
                inverse=False, scaling=None, layer_type=None)  # fmt: skip
    t5 = dict(bidirectional=True, max_distance=128, q_offset=2)
    table = randn(32, 3, dtype=torch.float64).requires_grad_()
    grad = randn(3, 5, 9, dtype=torch.float64).requires_grad_()
    tables = dict(base=10000.0, layout="interleaved", dtype="float32")
    cos_sin = dict(
        base=10000.0, layout="half", dtype="float64", layer_type=None,
        scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
    )  # fmt: skip
    cases = [  # (function, its tensors, its options)
        ("apply_rope", (x, None), rope),
        ("apply_rope", (x, torch.tensor([[3, 1, 4, 1, 5]])), rope),
        ("t5_bias", (table,), dict(q_len=5, k_len=9, **t5)),
        ("t5_bias_table_grad", (grad,), dict(num_buckets=32, **t5)),
        ("alibi_bias", (None,), dict(n_heads=4, q_len=3, k_len=7, max_bias=8.0, dtype="float32")),
        ("sinusoid", (None,), dict(positions=7, dim=8, **tables)),
        ("sinusoid", (torch.arange(6.0).reshape(2, 3),), dict(dim=8, **tables)),
        ("rope_cos_sin", (torch.arange(6),), dict(dim=8, **cos_sin)),
    ]
    for name, tensors, options in cases:
        args = (name, *tensors, *[None] * (pt._SLOTS - len(tensors)), *_options(**options))
        result = torch.library.opcheck(torch.ops.posenc.call.default, args)
        assert set(result.values()) == {"SUCCESS"}, (name, result)
    cos, sin = torch.ops.posenc.call(
        "rope_cos_sin", torch.arange(6), *[None] * (pt._SLOTS - 1), *_options(dim=8, **cos_sin)
    )
    assert cos.shape == (6, 4)  # partial_rotary_factor 0.5


def test_options_round_trip_through_the_operators_encoding():
    options = {
        "base": 500000.0,
        "layout": 'a "quoted" \\ name',
        "rotary_dim": None,
        "inverse": True,
        "scaling": {"rope_type": "longrope", "short_factor": [1.0, 2.5], "n": 3, "flag": False},
        "dtype": torch.bfloat16,
        "big": 2**60 + 1,
        "numpy": [np.float32(0.5), np.int64(7), np.bool_(True)],
    }
    spec, floats, ints = pt.encode(options)
    decoded = pt.decode(spec, floats, ints)
    expected = dict(options, dtype="bfloat16", numpy=[0.5, 7, True])
    assert decoded == expected
    assert type(decoded["scaling"]["n"]) is int and type(decoded["big"]) is int
    with pytest.raises(TypeError, match="cannot be an option"):
        pt.encode({"scaling": object()})


def test_a_config_object_is_carried_as_its_rope_parameters(transformers):
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=131072,
        rope_parameters=dict(LLAMA3_ROPE, original_max_position_embeddings=8192),
    )
    import json

    plain = json.loads(config_text(config, None))
    for dim in (64,):
        np.testing.assert_array_equal(
            posenc.rope_frequencies(dim, scaling=plain)[0],
            posenc.rope_frequencies(dim, scaling=config)[0],
        )
    with pytest.raises(ValueError, match="disagrees with the config's head dimension"):
        posenc.rope_frequencies(32, scaling=plain)


def test_config_text_is_marked_as_torch_compiles_decorator_marks_it():
    import torch._dynamo

    def f(config, layer_type):
        return ""

    marked = torch.compiler.assume_constant_result(f)
    flags = {k: v for k, v in vars(marked).items() if not k.startswith("__")}
    assert flags and all(getattr(config_text, k, None) == v for k, v in flags.items())
    # and the wrapper's check that posenc's torch module is loaded
    assert all(getattr(_interop._torch_ready, k, None) == v for k, v in flags.items())


def test_the_builders_have_the_public_signatures_and_device():
    for name, builder in pt.BUILDERS.items():
        public = inspect.signature(getattr(posenc, name))
        params = list(public.parameters.values())
        assert params[-1].name == "device" and params[-1].kind == inspect.Parameter.KEYWORD_ONLY
        expected = [(p.name, p.kind, p.default) for p in params]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(builder).parameters.values()]
        assert got == expected, name


@pytest.mark.parametrize(
    "name", sorted(set(pt.BUILDERS) - set(pt._records.RELATIVE))
)  # the relative terms': tests/test_relative_grad.py
def test_the_operator_path_gives_the_numbers_of_the_direct_path(name):
    # the same call, once directly and once through the operators (a tensor
    # that requires grad sends a call there)
    table = randn(32, 4)
    calls = {
        "apply_rope": lambda: (
            posenc.apply_rope,
            (randn(2, 4, 5, 16), torch.tensor([[1, 2, 3, 4, 5], [9, 8, 7, 6, 5]])),
            {
                "scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 4,
                }
            },
            "x",
        ),
        "rope_cos_sin": lambda: (posenc.rope_cos_sin, (torch.arange(7), 16), {}, None),
        "sinusoid": lambda: (posenc.sinusoid, (9, 8), {"dtype": torch.float64}, None),
        "alibi_bias": lambda: (
            posenc.alibi_bias,
            (4, 3, 6),
            {"causal": False, "dtype": torch.float64},
            None,
        ),
        "t5_bias": lambda: (posenc.t5_bias, (table, 3, 6), {"q_offset": 5}, "table"),
        "kerple_bias": lambda: (
            posenc.kerple_bias,
            (torch.tensor([0.5, 1.5]), torch.tensor([0.75, 1.25]), 3, 6),
            {"kind": "power"},
            "r1",
        ),
        "cope_bias": lambda: (
            posenc.cope_bias,
            (randn(2, 4, 3), randn(2, 4, 5), randn(6, 3)),
            {"causal": False},
            "query",
        ),
        "complex_order_embedding": lambda: (  # its gradients: tests/test_complex_order.py
            posenc.complex_order_embedding,
            (torch.tensor([[0, 3, 3], [1, 0, 4]]), torch.arange(1, 4), *randn(3, 5, 2).unbind()),
            {},
            None,
        ),
        "sandwich_bias": lambda: (
            posenc.sandwich_bias,
            (4, 3, 6),
            {"dim": 8, "dtype": torch.float64},
            None,
        ),
        "fire_bias": lambda: (
            posenc.fire_bias,
            (randn(8, 1), randn(8), randn(2, 8), randn(2), 0.3, 2.5, 3, 6),
            {"causal": False},
            "w1",
        ),
    }
    fn, args, kwargs, grad_arg = calls[name]()
    direct = fn(*args, **kwargs)
    built = pt.BUILDERS[name](*args, **kwargs)
    for a, b in zip(direct if isinstance(direct, tuple) else (direct,),
                    built if isinstance(built, tuple) else (built,)):  # fmt: skip
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    if grad_arg is not None:
        args = tuple(a.clone().requires_grad_() if i == 0 else a for i, a in enumerate(args))
        recorded = fn(*args, **kwargs)
        assert recorded.grad_fn is not None
        torch.testing.assert_close(recorded.detach(), direct, rtol=0, atol=0)


# ---------------------------------------------------------------- torch.compile


class _Block(torch.nn.Module):
    """A small attention block calling each function that has an operator."""

    def __init__(self, scaling):
        super().__init__()
        self.table = torch.nn.Parameter(randn(32, 4, seed=11))
        self.proj = torch.nn.Linear(16, 16, dtype=torch.float64)
        self.scaling = scaling

    def forward(self, x, position_ids):
        b, s, _ = x.shape
        q = self.proj(x).view(b, s, 4, 4).transpose(1, 2)  # (batch, heads, seq, 4)
        q = posenc.apply_rope(q, position_ids, scaling=self.scaling)
        k = posenc.apply_rope(q * 0.5, position_ids, scaling=self.scaling)
        scores = q @ k.transpose(-1, -2)
        scores = posenc.t5_bias(self.table.double(), s, s, scores=scores)
        scores = posenc.alibi_bias(4, s, scores=scores, causal=False)
        pe = posenc.sinusoid(position_ids, 16, dtype=torch.float64)
        cos, sin = posenc.rope_cos_sin(position_ids, 4, dtype=torch.float64)
        y = scores.softmax(-1) @ q
        return y.sum(1) @ torch.ones(4, 16, dtype=torch.float64) * pe + cos.sum() - sin.sum()


def _run(model, x, ids):
    model.zero_grad()
    y = model(x, ids)
    y.pow(2).sum().backward()
    return y.detach(), model.table.grad.clone(), model.proj.weight.grad.clone()


@pytest.mark.parametrize("scaling", ["dict", "config"])
def test_torch_compile_fullgraph_traces_a_model_and_gives_the_eager_numbers(transformers, scaling):
    from transformers import LlamaConfig

    if scaling == "dict":
        scaling = {"rope_type": "linear", "factor": 2.0}
    else:
        scaling = LlamaConfig(
            hidden_size=16,
            num_attention_heads=4,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 8},
        )  # fmt: skip
    torch.manual_seed(0)
    model = _Block(scaling)
    x = randn(2, 6, 16, dtype=torch.float64)
    ids = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 3, 4]])
    eager = _run(model, x, ids)
    compiled = torch.compile(model, fullgraph=True)
    traced = _run(compiled, x, ids)
    for a, b in zip(eager, traced):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert eager[1].abs().sum() > 0  # the table did get a gradient


def test_a_compiled_call_follows_the_config_object_it_is_given(transformers):
    from transformers import LlamaConfig

    def rotate(q, config):
        return posenc.apply_rope(q, scaling=config)

    compiled = torch.compile(rotate, fullgraph=True)
    q = randn(1, 2, 5, 8)
    for theta in (10000.0, 500.0, 10000.0):
        config = LlamaConfig(
            hidden_size=16,
            num_attention_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": theta},
        )
        expected = rope64(q.double().numpy(), np.arange(5), base=theta)
        np.testing.assert_allclose(compiled(q, config).double().numpy(), expected, atol=2e-6)


def test_torch_compile_follows_changing_lengths_and_offsets():
    def step(q, table, k_len):
        q = posenc.apply_rope(q, offset=k_len - 1)
        bias = posenc.t5_bias(table, 1, k_len, q_offset=k_len - 1)
        return q.sum() + bias.sum() + posenc.alibi_bias(4, 1, k_len, device="cpu").sum()

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    table = randn(32, 4)
    for k_len in (5, 9, 130):
        q = randn(1, 4, 1, 8, seed=k_len)
        torch.testing.assert_close(compiled(q, table, k_len), step(q, table, k_len))


def test_torch_export_records_the_operators_and_the_exported_program_gives_the_numbers():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(randn(32, 4))

        def forward(self, q, ids):
            n = q.shape[2]
            q = posenc.apply_rope(q, ids)
            s = posenc.t5_bias(self.table, n, n, scores=q @ q.transpose(-1, -2))
            s = posenc.alibi_bias(4, n, scores=s)
            s = s + posenc.sinusoid(n, n, dtype=torch.float32)
            return s + posenc.rope_cos_sin(ids[0], n, dtype=torch.float32)[0]

    model = Model()
    q, ids = randn(2, 4, 6, 6), torch.arange(6).expand(2, 6)
    program = torch.export.export(model, (q, ids))
    nodes = [node for node in program.graph.nodes if "posenc" in str(node.target)]
    assert {str(node.target) for node in nodes} == {"posenc.call.default"}
    expected = {"apply_rope", "t5_bias", "alibi_bias", "sinusoid", "rope_cos_sin"}
    assert {node.args[0] for node in nodes} == expected  # the function each call runs
    torch.testing.assert_close(program.module()(q, ids), model(q, ids), rtol=0, atol=0)


def test_a_function_compiled_on_the_first_torch_call_is_not_compiled_again_from_threads():
    # posenc's first torch call loads its torch module; nothing a compiled
    # graph guards on may change then, or the second call recompiles (and
    # eight threads making it at once fail under fullgraph=True)
    script = textwrap.dedent(
        """
        import threading
        import torch
        import torch._dynamo
        from torch._dynamo.utils import counters
        import posenc

        torch._dynamo.config.error_on_recompile = True


        def step(q, r, scores):
            q = posenc.apply_rope(q, offset=3)
            scores = posenc.alibi_bias(2, 3, scores=scores)
            return posenc.xl_position_term(q, r, scores=scores)


        # a recompile is dynamo's, whatever the backend: aot_eager's is quick
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        g = torch.Generator().manual_seed(0)
        q, r = torch.randn(1, 2, 3, 4, generator=g), torch.randn(2, 6, 4, generator=g)
        first = compiled(q, r, torch.zeros(1, 2, 3, 3))  # posenc's first torch call
        results, errors = [None] * 8, []


        def run(i):
            try:
                results[i] = compiled(q, r, torch.zeros(1, 2, 3, 3))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")


        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
        want = step(q, r, torch.zeros(1, 2, 3, 3))
        assert all(torch.equal(y, want) for y in [first] + results)
        print("ok")
        """
    )
    done = child_process.run("-c", script)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]


def test_functions_without_an_operator_break_the_graph_and_still_run():
    def f(x):
        return x + posenc.alibi_slopes(4, device="cpu")

    def g(x):
        return x - posenc.relative_positions(4, device="cpu")[0]

    x = torch.ones(4, dtype=torch.float64)
    torch.testing.assert_close(torch.compile(f)(x), f(x))
    with pytest.raises(Exception, match="skipped"):
        torch.compile(g, fullgraph=True)(x)


# ---------------------------------------------------------------- forked DataLoader workers


def test_dataloader_workers_forked_from_a_parent_call_rotate_tensors(tmp_path):
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform")
    script = textwrap.dedent(
        """
        import warnings
        import torch
        import posenc
        from torch.utils.data import DataLoader, Dataset

        warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)
        posenc.set_num_threads(2)
        X = torch.randn(4, 8, 512, 64, generator=torch.Generator().manual_seed(0))
        PARENT = posenc.apply_rope(X)  # a parallel call before the fork


        class Rotated(Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                y = posenc.apply_rope(X[i : i + 1])
                out = torch.empty_like(y)
                posenc.apply_rope(X[i : i + 1], out=out)
                return y, out


        loader = DataLoader(Rotated(), batch_size=None, num_workers=2,
                            multiprocessing_context="fork")
        for i, (y, out) in enumerate(loader):
            assert type(y) is torch.Tensor and torch.equal(y, PARENT[i : i + 1]), i
            assert torch.equal(out, y), i
        print("ok")
        """
    )
    done = child_process.run("-c", script, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


# ---------------------------------------------------------------- M-RoPE and axial RoPE


def _mrope64(x, ids, sections, interleaved=False, base=10000.0):
    """M-RoPE in float64, written out: pair i rotated by the position of its
    section's row (in turn, or Qwen3-VL's interleaving)."""
    x = np.asarray(x, dtype=np.float64)
    half = x.shape[-1] // 2
    n = len(sections)
    if interleaved:
        row = np.zeros(half, int)
        for c in range(1, n):
            row[c : c + n * sections[c] : n] = c
    else:
        row = np.repeat(np.arange(n), sections)
    inv = base ** (-np.arange(0, 2 * half, 2, dtype=np.float64) / (2 * half))
    pos = np.asarray(ids, dtype=np.float64)[row]  # (half, batch, seq)
    angle = np.moveaxis(pos, 0, -1)[:, None] * inv  # (batch, 1, seq, half)
    c, s = np.cos(angle), np.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_tensors_in_and_out_with_gradients(interleaved):
    sections = [4, 2, 2] if not interleaved else [3, 3, 2]
    # 2 rows of positions of their own, 2 heads sharing them, every section
    x = randn(2, 2, 5, 16, dtype=torch.float64).requires_grad_()
    ids = torch.randint(0, 30, (3, 2, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(mrope_section=sections, mrope_interleaved=interleaved)
    y = posenc.apply_rope(x, ids, **kw)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    np.testing.assert_allclose(
        y.detach().numpy(), _mrope64(x.detach(), ids, sections, interleaved), atol=1e-14
    )
    assert torch.autograd.gradcheck(lambda t: posenc.apply_rope(t, ids, **kw), (x,))
    assert torch.autograd.gradgradcheck(lambda t: posenc.apply_rope(t, ids, **kw), (x,))
    # the sections as a tensor, and cos/sin
    y2 = posenc.apply_rope(x.detach().float(), ids, mrope_section=torch.tensor(sections),
                           mrope_interleaved=interleaved)  # fmt: skip
    np.testing.assert_array_equal(
        y2.numpy(), posenc.apply_rope(x.detach().float().numpy(), ids.numpy(), **kw)
    )
    cos, sin = posenc.rope_cos_sin(ids, 16, dtype=torch.float64, **kw)
    assert isinstance(cos, torch.Tensor) and cos.shape == (2, 5, 16)
    want = reference.rope_cos_sin(ids.numpy(), 16, dtype=np.float64, **kw)
    np.testing.assert_allclose(cos.numpy(), want[0], atol=1e-15)
    np.testing.assert_allclose(sin.numpy(), want[1], atol=1e-15)


def test_mrope_and_axial_rope_under_torch_compile_fullgraph():
    sections = [4, 2, 2]

    def f(q, ids, grid_ids):
        q = posenc.apply_rope(q, ids, mrope_section=sections)
        cos, sin = posenc.rope_cos_sin(grid_ids, 16, axial=2, dtype=torch.float64)
        v = posenc.apply_rope(q[0].transpose(0, 1), grid_ids, axial=[6, 2], seq_axis=-3)
        # posenc's results alone: the compiled graph is compared bit for bit
        # (a torch reduction among them may sum in another order when compiled)
        return q, cos, sin, v

    q = randn(2, 3, 8, 16, dtype=torch.float64).requires_grad_()
    ids = torch.randint(0, 30, (3, 2, 8), generator=torch.Generator().manual_seed(2))
    grid_ids = torch.from_numpy(posenc.vision_position_ids([[2, 2, 2]]))
    eager = f(q, ids, grid_ids)
    compiled = torch.compile(f, fullgraph=True)(q, ids, grid_ids)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    def loss(out):
        return out[3].pow(2).sum() + (out[0] * out[0].detach()).sum()

    g_eager = torch.autograd.grad(loss(eager), q)[0]
    g_compiled = torch.autograd.grad(loss(compiled), q)[0]
    torch.testing.assert_close(g_eager, g_compiled, rtol=1e-12, atol=1e-12)
    assert eager[1].shape == (8, 16)
    want = reference.apply_rope(q.detach().numpy(), ids.numpy(), mrope_section=sections)[0]
    want = reference.apply_rope(np.swapaxes(want, 0, 1), grid_ids.numpy(), axial=[6, 2],
                                seq_axis=-3)  # fmt: skip
    np.testing.assert_allclose(eager[3].detach().numpy(), want, atol=1e-14)


def test_mrope_errors_are_the_same_with_tensors():
    x = torch.zeros(1, 2, 5, 16)
    with pytest.raises(ValueError, match="leading axis of 3 rows"):
        posenc.apply_rope(x, torch.zeros(2, 1, 5, dtype=torch.long), mrope_section=[4, 2, 2])
    with pytest.raises(ValueError, match="leading axis of 3 rows"):
        posenc.rope_cos_sin(5, 16, mrope_section=[4, 2, 2])
    with pytest.raises(ValueError, match="add up"):
        posenc.apply_rope(x, torch.zeros(3, 1, 5, dtype=torch.long), mrope_section=[4, 2, 1])
    compiled = torch.compile(lambda p: posenc.rope_cos_sin(p, 16, mrope_section=[4, 2, 2]))
    with pytest.raises(ValueError, match="leading axis of 3 rows"):
        compiled(torch.zeros(2, 5))


def test_a_qwen3_vl_config_object_is_carried_with_its_sections(transformers):
    # the config's mrope_section and mrope_interleaved reach the operator, eager
    # and under torch.compile, cos/sin of the rows' shape
    transformers.logging.set_verbosity_error()
    config = transformers.Qwen3VLTextConfig(
        hidden_size=256,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rope_parameters={"rope_type": "default", "mrope_section": [24, 20, 20],
                         "mrope_interleaved": True, "rope_theta": 5e6},
    )  # fmt: skip
    q = randn(1, 2, 9, 128, dtype=torch.float64)
    ids = torch.randint(0, 40, (3, 1, 9), generator=torch.Generator().manual_seed(4))
    want = reference.apply_rope(q.numpy(), ids.numpy(), scaling=dict(config.rope_parameters))
    eager = posenc.apply_rope(q, ids, scaling=config)
    np.testing.assert_allclose(eager.numpy(), want, rtol=0, atol=1e-14)
    compiled = torch.compile(
        lambda q, ids: posenc.apply_rope(q, ids, scaling=config), fullgraph=True
    )
    torch.testing.assert_close(compiled(q, ids), eager, rtol=0, atol=0)
    cos = torch.compile(
        lambda ids: posenc.rope_cos_sin(ids, 128, scaling=config)[0], fullgraph=True
    )
    assert cos(ids).shape == (1, 9, 128)


def test_a_config_carries_its_models_layout_of_pairs_to_the_operator(transformers):
    # the layout checks see through the operator: Cohere's interleaved pairs,
    # DeepSeek-V3's rope_interleave (the flag is not among the rope parameters)
    transformers.logging.set_verbosity_error()
    cohere = transformers.CohereConfig(hidden_size=256, num_attention_heads=4)
    deepseek = transformers.DeepseekV3Config(
        hidden_size=64, num_attention_heads=4, qk_rope_head_dim=16, qk_nope_head_dim=16,
        v_head_dim=16, kv_lora_rank=16, q_lora_rank=16,
    )  # fmt: skip
    deepseek.rope_interleave = True
    ids = torch.arange(7)[None]
    for config, dim, layout in ((cohere, 64, "interleaved"), (deepseek, 16, "interleaved_to_half")):
        x = randn(1, 2, 7, dim, dtype=torch.float64)
        with pytest.raises(ValueError, match=f"pass layout='{layout}'"):
            posenc.apply_rope(x, ids, scaling=config)
        got = posenc.apply_rope(x, ids, scaling=config, layout=layout)
        want = posenc.apply_rope(x.numpy(), ids.numpy(), scaling=config, layout=layout)
        np.testing.assert_array_equal(got.numpy(), want)


def test_numpy_blas_runs_on_one_thread_under_torch(monkeypatch):
    # posenc._blas: the products of a relative term called with tensors are
    # made with NumPy's OpenBLAS on one thread, its own count given back
    # after; called with NumPy arrays, on OpenBLAS's own count
    from posenc import _blas, _grad, _relative_engine

    if not _blas._functions():
        pytest.skip("NumPy here has no OpenBLAS (another BLAS): one_thread does nothing")
    setter, threads = _blas._functions()[0]
    own = threads()
    setter(2)  # two threads outside, whatever OPENBLAS_NUM_THREADS says
    before, seen = threads(), []

    def recording(fn):
        def call(*args, **kwargs):
            seen.append(threads())
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(
        _relative_engine, "_block_products", recording(_relative_engine._block_products)
    )
    monkeypatch.setattr(_grad, "sum_by_distance", recording(_grad.sum_by_distance))
    # (large enough for OpenBLAS to use its two threads outside; its bits
    # are the same on one thread, which the tensors' result shows)
    q, r = randn(1, 4, 256, 64), randn(4, 512, 64, seed=1)
    posenc.xl_position_term(q.numpy(), r.numpy())
    assert seen == [before]
    seen.clear()
    got = posenc.xl_position_term(q, r)
    assert seen == [1] and threads() == before
    want = posenc.xl_position_term(q.numpy(), r.numpy())
    np.testing.assert_array_equal(got.numpy(), want)
    seen.clear()
    q.requires_grad_(True)
    posenc.xl_position_term(q, r).sum().backward()  # the operator and its backward
    assert seen == [1, 1] and threads() == before == 2
    setter(own)
