"""bfloat16: RoPE and the biases added into bfloat16 scores."""

from __future__ import annotations

import sys

import numpy as np
from baselines_torch import _hf_alibi, _hf_t5_bias, _rope_torch
from common import Case, _rmw_of, _torch_of, copyto_of, have_transformers, torch

import posenc
from posenc import reference


def bfloat16_cases(quick):
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - depends on the machine
        print("bfloat16: ml_dtypes is not installed, cases left out", file=sys.stderr)
        return []
    bf16 = np.dtype(ml_dtypes.bfloat16)
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    shape = (1, 32, seq, 128)
    x = rng.standard_normal(shape).astype(bf16)
    out, y = np.empty_like(x), x.copy()
    cases.append(
        Case(
            name=f"apply_rope{shape} bfloat16, out=",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, out=out),
            memory=copyto_of(shape, np.float16),  # the same bytes
            numpy=lambda: reference.apply_rope(x),
            torch=_rope_torch(x, -2),
            note="torch: transformers' formula in bfloat16, cos/sin cached",
        )
    )
    cases.append(
        Case(
            name=f"apply_rope{shape} bfloat16, in place",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(y, out=y),
            memory=copyto_of(shape, np.float16),
            torch=_rope_torch(x, -2),
            note="torch: out of place",
        )
    )

    n_heads, n = (16, 1024) if quick else (16, 2048)
    scores = rng.standard_normal((1, n_heads, n, n)).astype(bf16)
    table = rng.standard_normal((32, n_heads)).astype(np.float32)
    tscores = _torch_of(scores.copy()) if torch is not None else None
    if torch is not None:

        def torch_alibi_add():
            a, causal = _hf_alibi(n_heads, n, n)
            return tscores.add_((a[None] + causal).to(torch.bfloat16))

    have_hf = have_transformers()  # the T5 comparison calls transformers' own bucketing
    ttable = torch.from_numpy(table).to(torch.bfloat16) if have_hf else None
    rmw = "memory: one read and one write of the scores; torch: "
    for title, call, torch_fn, note in [
        (
            f"alibi_bias({n_heads}, {n}, scores=) bfloat16 (1, {n_heads}, {n}, {n})",
            lambda: posenc.alibi_bias(n_heads, n, scores=scores),
            torch_alibi_add if torch is not None else None,
            "+ alibi + mask",
        ),
        (
            f"t5_bias((32, {n_heads}) table, {n}, scores=) bfloat16",
            lambda: posenc.t5_bias(table, n, scores=scores),
            (lambda: tscores.add_(_hf_t5_bias(ttable, n, n))) if have_hf else None,
            "+ compute_bias(...)",
        ),
    ]:
        cases.append(
            Case(
                name=title,
                nbytes=scores.nbytes,
                posenc=call,
                memory=_rmw_of(scores),
                torch=torch_fn,
                note=rmw + note,
            )
        )
    return cases
