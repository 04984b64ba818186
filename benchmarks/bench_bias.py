"""ALiBi and T5 biases: tables, into scores, a decoding step."""

from __future__ import annotations

import numpy as np
from baselines_jax import _jax_alibi, _jax_t5
from baselines_torch import _hf_alibi, _hf_t5_bias
from common import Case, have_transformers, torch

import posenc
from posenc import reference


def bias_cases(quick):
    n_heads, n = (16, 1024) if quick else (16, 2048)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((32, n_heads)).astype(np.float32)
    have_hf = have_transformers()  # the T5 comparison calls transformers' own bucketing
    cases = []

    out = np.empty((n_heads, n, n), np.float32)
    if torch is not None:

        def torch_alibi():
            alibi, causal = _hf_alibi(n_heads, n, n)
            return alibi + causal

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, {n}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, n, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.alibi_bias(n_heads, n),
            torch=torch_alibi if torch is not None else None,
            jit=_jax_alibi(n_heads, n, n),
            note="torch, jit: BLOOM's build_alibi_tensor + causal mask, materialised",
        )
    )

    ttable = torch.from_numpy(table) if torch is not None else None
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, {n}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.t5_bias(table, n, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.t5_bias(table, n),
            torch=(lambda: _hf_t5_bias(ttable, n, n).contiguous()) if have_hf else None,
            jit=_jax_t5(table, n, n),
            note="torch: T5Attention's bucketing + embedding lookup, made contiguous; "
            "jit: the same in jax.numpy",
        )
    )

    scores = rng.standard_normal((1, n_heads, n, n)).astype(np.float32)
    alibi = posenc.alibi_bias(n_heads, n)
    tscores = torch.from_numpy(scores.copy()) if torch is not None else None
    if torch is not None:

        def torch_alibi_add():
            a, causal = _hf_alibi(n_heads, n, n)
            return tscores.add_(a[None]).add_(causal)

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, {n}, scores=) float32 (1, {n_heads}, {n}, {n})",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, n, scores=scores),
            memory=lambda: np.add(scores, alibi, out=scores),
            numpy=lambda: reference.alibi_bias(n_heads, n, scores=scores),
            torch=torch_alibi_add if torch is not None else None,
            jit=_jax_alibi(n_heads, n, n, scores=scores),
            note="memory: scores += precomputed bias; torch: scores += alibi (broadcast) + mask; "
            "jit: scores + bias, a new array",
        )
    )

    # one decoding step over a long cache: the bias of one query, per head
    k = 8192 if quick else 32768
    step = np.empty((n_heads, 1, k), np.float32)
    if torch is not None:

        def torch_alibi_step():
            a, causal = _hf_alibi(n_heads, 1, k)
            return a + causal

    cases.append(
        Case(
            name=f"alibi_bias({n_heads}, 1, {k}) float32, out= (decoding)",
            nbytes=step.nbytes,
            posenc=lambda: posenc.alibi_bias(n_heads, 1, k, out=step),
            memory=lambda: step.fill(0.5),
            numpy=lambda: reference.alibi_bias(n_heads, 1, k),
            torch=torch_alibi_step if torch is not None else None,
            jit=_jax_alibi(n_heads, 1, k),
            note="torch: BLOOM's build_alibi_tensor + causal mask",
        )
    )
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, 1, {k}) float32, out= (decoding)",
            nbytes=step.nbytes,
            posenc=lambda: posenc.t5_bias(table, 1, k, out=step),
            memory=lambda: step.fill(0.5),
            numpy=lambda: reference.t5_bias(table, 1, k),
            torch=(lambda: _hf_t5_bias(ttable, 1, k).contiguous()) if have_hf else None,
            jit=_jax_t5(table, 1, k),
            note="torch: T5Attention's bucketing + embedding lookup",
        )
    )

    t5 = posenc.t5_bias(table, n)
    cases.append(
        Case(
            name=f"t5_bias(({table.shape[0]}, {n_heads}) table, {n}, scores=) float32",
            nbytes=scores.nbytes,
            posenc=lambda: posenc.t5_bias(table, n, scores=scores),
            memory=lambda: np.add(scores, t5, out=scores),
            numpy=lambda: reference.t5_bias(table, n, scores=scores),
            torch=(lambda: tscores.add_(_hf_t5_bias(ttable, n, n))) if have_hf else None,
            jit=_jax_t5(table, n, n, scores=scores),
            note="memory: scores += precomputed bias; torch: scores += compute_bias(...); "
            "jit: scores + bias, a new array",
        )
    )
    return cases
