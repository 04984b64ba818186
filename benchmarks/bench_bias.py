"""ALiBi and T5 biases: tables, into scores, a decoding step."""

from __future__ import annotations

import numpy as np
from baselines_jax import _jax_alibi, _jax_t5
from baselines_torch import _hf_alibi, _hf_t5_bias
from common import Case, have_transformers, torch

import posenc
from posenc import reference


def _bias_cases(fn, arg, head, sizes, arrays, torch_fns, jit_of, notes, shape=""):
    """The cases of one bias ``fn(arg, q_len, k_len)`` (posenc's function,
    the reference's of the same name beside it): "out", its (n, n) table
    into out=; "scores", added into the scores; "decoding", one query over
    k keys into out=.  `head` begins each case's name, `shape` ends the
    scores case's; `torch_fns` and `notes` hold each case's torch callable
    and note, `jit_of(arg, q_len, k_len, scores=None)` the jax.numpy one."""
    ref = getattr(reference, fn.__name__)
    (n, k), (out, step, scores) = sizes, arrays
    whole = fn(arg, n)
    return {
        "out": Case(
            name=f"{head}, {n}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: fn(arg, n, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: ref(arg, n),
            torch=torch_fns["out"],
            jit=jit_of(arg, n, n),
            note=notes["out"],
        ),
        "scores": Case(
            name=f"{head}, {n}, scores=) float32{shape}",
            nbytes=scores.nbytes,
            posenc=lambda: fn(arg, n, scores=scores),
            memory=lambda: np.add(scores, whole, out=scores),
            numpy=lambda: ref(arg, n, scores=scores),
            torch=torch_fns["scores"],
            jit=jit_of(arg, n, n, scores=scores),
            note=notes["scores"],
        ),
        "decoding": Case(
            name=f"{head}, 1, {k}) float32, out= (decoding)",
            nbytes=step.nbytes,
            posenc=lambda: fn(arg, 1, k, out=step),
            memory=lambda: step.fill(0.5),
            numpy=lambda: ref(arg, 1, k),
            torch=torch_fns["decoding"],
            jit=jit_of(arg, 1, k),
            note=notes["decoding"],
        ),
    }


def bias_cases(quick):
    n_heads, n = (16, 1024) if quick else (16, 2048)
    k = 8192 if quick else 32768  # one decoding step over a long cache
    rng = np.random.default_rng(0)
    table = rng.standard_normal((32, n_heads)).astype(np.float32)
    out = np.empty((n_heads, n, n), np.float32)
    scores = rng.standard_normal((1, n_heads, n, n)).astype(np.float32)
    step = np.empty((n_heads, 1, k), np.float32)
    arrays = (out, step, scores)
    have_hf = have_transformers()  # the T5 comparison calls transformers' own bucketing
    tscores = torch.from_numpy(scores.copy()) if torch is not None else None
    ttable = torch.from_numpy(table) if torch is not None else None

    def torch_alibi(q_len, k_len):
        a, causal = _hf_alibi(n_heads, q_len, k_len)
        return a + causal

    def torch_alibi_add():
        a, causal = _hf_alibi(n_heads, n, n)
        return tscores.add_(a[None]).add_(causal)

    alibi = _bias_cases(
        posenc.alibi_bias,
        n_heads,
        f"alibi_bias({n_heads}",
        (n, k),
        arrays,
        {
            "out": (lambda: torch_alibi(n, n)) if torch is not None else None,
            "scores": torch_alibi_add if torch is not None else None,
            "decoding": (lambda: torch_alibi(1, k)) if torch is not None else None,
        },
        _jax_alibi,
        {
            "out": "torch, jit: BLOOM's build_alibi_tensor + causal mask, materialised",
            "scores": "memory: scores += precomputed bias; torch: scores += alibi (broadcast) "
            "+ mask; jit: scores + bias, a new array",
            "decoding": "torch: BLOOM's build_alibi_tensor + causal mask",
        },
        shape=f" (1, {n_heads}, {n}, {n})",
    )
    t5 = _bias_cases(
        posenc.t5_bias,
        table,
        f"t5_bias(({table.shape[0]}, {n_heads}) table",
        (n, k),
        arrays,
        {
            "out": (lambda: _hf_t5_bias(ttable, n, n).contiguous()) if have_hf else None,
            "scores": (lambda: tscores.add_(_hf_t5_bias(ttable, n, n))) if have_hf else None,
            "decoding": (lambda: _hf_t5_bias(ttable, 1, k).contiguous()) if have_hf else None,
        },
        _jax_t5,
        {
            "out": "torch: T5Attention's bucketing + embedding lookup, made contiguous; "
            "jit: the same in jax.numpy",
            "scores": "memory: scores += precomputed bias; torch: scores += compute_bias(...); "
            "jit: scores + bias, a new array",
            "decoding": "torch: T5Attention's bucketing + embedding lookup",
        },
    )
    return [
        alibi["out"],
        t5["out"],
        alibi["scores"],
        alibi["decoding"],
        t5["decoding"],
        t5["scores"],
    ]
