"""The relative terms under torch's autograd (against transformers' own
autograd: tests/conformance/test_relative_transformers.py).

- ``torch.autograd.gradcheck`` (finite differences) of every function,
  with ``scores=`` and broadcast batches;
- the operators (``torch.ops.posenc.call`` and ``relative_grad``):
  torch's opcheck, the bits of the direct path, dtypes, torch.compile.
"""

import pytest

import posenc


@pytest.fixture(scope="module")
def pt(torch):
    from posenc import _torch

    return _torch


# ---------------------------------------------------------------- every function, by gradcheck


def _calls(torch):
    """name -> (function of the tensors, the tensors): float64, small."""
    torch.manual_seed(0)
    h, q, k, d = 2, 4, 6, 4

    def t(*shape):
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    table = posenc.tener_relative_table(6, d, dtype=torch.float64).requires_grad_()
    return {
        "xl": (lambda q_, r, b: posenc.xl_position_term(q_, r, bias=b, k_len=k),
               (t(2, h, q, d), t(h, q + k, d), t(h, d))),
        "xl scores": (lambda q_, r, b, s: posenc.xl_position_term(q_, r, bias=b, scores=s * 1),
                      (t(1, h, q, d), t(h, q + k, d), t(h, d), t(3, h, q, k))),
        "content": (lambda k_, u, s: posenc.xl_content_bias(k_, u, scores=s * 1),
                    (t(2, h, k, d), t(h, d), t(2, h, q, k))),
        "content alone": (lambda k_, u: posenc.xl_content_bias(k_, u), (t(2, h, k, d), t(h, d))),
        "tener": (lambda q_, k_, tab, v: posenc.tener_position_term(q_, k_, tab, v=v),
                  (t(2, h, q, d), t(2, h, q, d), table, t(h, d))),
        "tener scores": (
            lambda q_, k_, tab, u, v: posenc.tener_scores(q_, k_, tab, u=u, v=v, scale=True),
            (t(2, h, q, d), t(2, h, q, d), table, t(h, d), t(h, d))),
        "deberta": (lambda q_, k_, pk, pq, s: posenc.deberta_attention_bias(
                        q_, k_, pk, pq, position_buckets=4, max_relative_positions=16,
                        scores=s * 1),
                    (t(2, h, q, d), t(2, h, k, d), t(h, 8, d), t(h, 8, d), t(2, h, q, k))),
        "shaw": (lambda q_, a: posenc.shaw_key_term(q_, a, max_distance=2, k_len=k),
                 (t(2, h, q, d), t(5, d))),
        "shaw values": (lambda w, a: posenc.shaw_value_term(w, a, max_distance=2),
                        (t(2, h, q, k), t(h, 5, d))),
        "tupe": (lambda a, b, c, s: posenc.tupe_bias(
                     a, b, rel_table=c, max_distance=8, scores=s * 1),
                 (t(h, q + 1, d), t(h, q + 1, d), t(9, h), t(2, h, q, q))),
    }  # fmt: skip


@pytest.mark.parametrize(
    "case",
    [
        "xl",
        "xl scores",
        "content",
        "content alone",
        "tener",
        "tener scores",
        "deberta",
        "shaw",
        "shaw values",
        "tupe",
    ],
)
def test_gradcheck(torch, case):
    fn, tensors = _calls(torch)[case]
    assert torch.autograd.gradcheck(fn, tensors)


def test_scores_written_in_place_are_returned_and_carry_the_gradient(torch):
    torch.manual_seed(1)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    r = torch.randn(2, 8, 4, dtype=torch.float64)
    base = torch.randn(1, 2, 3, 5, dtype=torch.float64, requires_grad=True)
    scores = base * 2
    got = posenc.xl_position_term(q, r, scores=scores)
    assert got is scores and scores._version > 0
    got.sum().backward()
    torch.testing.assert_close(base.grad, torch.full_like(base, 2.0))
    assert q.grad.shape == q.shape
    leaf = torch.zeros(1, 2, 3, 5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="scores is a leaf tensor that requires grad"):
        posenc.xl_position_term(q, r, scores=leaf)


def test_a_gradients_gradient_is_an_error_not_a_silent_zero(torch):
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    r = torch.randn(2, 8, 4, dtype=torch.float64)
    (g,) = torch.autograd.grad(posenc.xl_position_term(q, r).square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="posenc.relative_grad"):
        g.sum().backward()


def test_the_operator_path_gives_the_bits_of_the_direct_path(torch, pt):
    # bfloat16 tensors into bfloat16 scores, a term rounded and added per
    # part: the same call directly and with a tensor that requires grad
    torch.manual_seed(7)
    h, q, k, d = 2, 5, 7, 8

    def t(*shape):
        return torch.randn(*shape).bfloat16()

    table = posenc.tener_relative_table(q, d, dtype=torch.bfloat16)
    calls = {
        "xl_position_term": ((t(1, h, q, d), t(h, q + k, d)), {"bias": t(h, d)}, (3, h, q, k)),
        "xl_content_bias": ((t(1, h, k, d), t(h, d)), {}, (3, h, q, k)),
        "tener_position_term": (
            (t(1, h, q, d), t(1, h, q, d), table), {"v": t(h, d)}, (2, h, q, q)
        ),
        "tener_scores": (
            (t(1, h, q, d), t(1, h, q, d), table), {"u": t(h, d), "scale": True}, None
        ),
        "deberta_attention_bias": (
            (t(1, h, q, d), t(1, h, k, d), t(h, 8, d), t(h, 8, d)),
            {"position_buckets": 4, "max_relative_positions": 16},
            (3, h, q, k),
        ),
        "shaw_key_term": ((t(1, h, q, d), t(5, d)), {"max_distance": 2}, (3, h, q, k)),
        "shaw_value_term": ((t(1, h, q, k), t(5, d)), {"max_distance": 2}, None),
        "tupe_bias": ((t(h, q + 1, d), t(h, q + 1, d)), {"rel_table": t(9, h)}, (3, h, q, q)),
    }  # fmt: skip
    assert set(calls) == set(pt._records.RELATIVE)
    for name, (args, kwargs, shape) in calls.items():
        for into in [None] + ([torch.randn(shape).bfloat16()] if shape else []):
            direct = _call(getattr(posenc, name), args[0], args, kwargs, into)
            leading = args[0].clone().requires_grad_()
            recorded = _call(getattr(posenc, name), leading, args, kwargs, into)
            assert recorded.grad_fn is not None, name
            assert recorded.dtype == direct.dtype == torch.bfloat16, name
            assert torch.equal(recorded.detach().view(torch.int16), direct.view(torch.int16)), name
            recorded.float().sum().backward()
            assert leading.grad.dtype == torch.bfloat16 and leading.grad.shape == leading.shape


def _call(fn, first, args, kwargs, scores):
    """fn(first, *args[1:], **kwargs), into a copy of `scores` if not None."""
    extra = {} if scores is None else {"scores": scores.clone()}
    return fn(first, *args[1:], **kwargs, **extra)


def test_the_operators_pass_torchs_opcheck(torch, pt):
    torch.manual_seed(3)
    q = torch.randn(2, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    r = torch.randn(2, 10, 4, dtype=torch.float64, requires_grad=True)
    scores = torch.randn(2, 2, 4, 6, dtype=torch.float64)
    bias = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    given = pt.encode({"k_len": 6, "q_offset": None, "causal": False})
    from_scores = pt.encode({"k_len": None, "q_offset": None, "causal": False})
    slots = pt._SLOTS  # the operator's tensor arguments
    for tensors, options in (((q, r), given), ((q, r, bias, scores), from_scores)):
        args = ("xl_position_term", *tensors, *[None] * (slots - len(tensors)), *options)
        result = torch.library.opcheck(torch.ops.posenc.call.default, args)
        assert set(result.values()) == {"SUCCESS"}, result
    grad = torch.randn(2, 2, 4, 6, dtype=torch.float64)
    wanted = [True, True, False, False]
    args = ("xl_position_term", [q, r, None, None], grad, wanted, *pt.encode(
        {"k_len": 6, "q_offset": None, "causal": False}))  # fmt: skip
    result = torch.library.opcheck(torch.ops.posenc.relative_grad.default, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_torch_compile_fullgraph_of_a_relative_attention_and_its_backward(torch):
    torch.manual_seed(4)

    def attention(q, k, r, u, v):
        scores = q @ k.transpose(-1, -2)
        scores = posenc.xl_content_bias(k, u, scores=scores)
        scores = posenc.xl_position_term(q, r, bias=v, scores=scores)
        return torch.softmax(scores, dim=-1)

    def inputs():
        torch.manual_seed(4)
        shapes = [(2, 3, 5, 8), (2, 3, 5, 8), (3, 10, 8), (3, 8), (3, 8)]
        return [torch.randn(*s, requires_grad=True) for s in shapes]

    eager_in, compiled_in = inputs(), inputs()
    eager = attention(*eager_in)
    compiled = torch.compile(attention, fullgraph=True)(*compiled_in)
    # the softmax and the product are inductor's, posenc's terms the kernels'
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-7)
    weight = torch.randn(eager.shape)
    (eager * weight).sum().backward()
    (compiled * weight).sum().backward()
    for a, b in zip(compiled_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-6)


def test_torch_compile_of_a_relative_term_follows_changing_lengths(torch):
    # traced for the shapes it is given: a new length compiles anew, with
    # the eager numbers and gradients
    def f(q, r):
        return posenc.xl_position_term(q, r)

    compiled = torch.compile(f, dynamic=True, fullgraph=True)
    for length in (5, 9):
        q = torch.randn(1, 2, length, 8, dtype=torch.float64, requires_grad=True)
        r = torch.randn(2, 2 * length, 8, dtype=torch.float64)
        got, want = compiled(q, r), f(q, r)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        weight = torch.randn(want.shape, dtype=torch.float64)
        (g,) = torch.autograd.grad((got * weight).sum(), q)
        (w,) = torch.autograd.grad((want * weight).sum(), q)
        torch.testing.assert_close(g, w, rtol=0, atol=0)
