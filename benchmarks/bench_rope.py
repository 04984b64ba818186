"""RoPE: the two layouts, in place, decoding, after a BLAS product, by length."""

from __future__ import annotations

import numpy as np
from baselines_jax import _jax_rope
from baselines_torch import _rope_torch
from common import Case, copyto_of

import posenc
from posenc import reference


def rope_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    for dtype in ("float32", "float16"):
        for shape, seq_axis in [((1, 32, seq, 128), -2), ((1, seq, 32, 128), -3)]:
            x = rng.standard_normal(shape).astype(dtype)
            out = np.empty_like(x)
            y = x.copy()
            label = f"apply_rope{shape} {dtype} seq_axis={seq_axis}"

            def numpy_ref(x=x, a=seq_axis):
                return reference.apply_rope(x, seq_axis=a)

            torch_ref = _rope_torch(x, seq_axis)
            cases.append(
                Case(
                    name=f"{label}, out=",
                    nbytes=x.nbytes,
                    posenc=lambda x=x, out=out, a=seq_axis: posenc.apply_rope(
                        x, seq_axis=a, out=out
                    ),
                    memory=copyto_of(shape, dtype),
                    numpy=numpy_ref,
                    torch=torch_ref,
                    jit=_jax_rope(x, seq_axis),
                )
            )
            cases.append(
                Case(
                    name=f"{label}, in place",
                    nbytes=x.nbytes,
                    posenc=lambda y=y, a=seq_axis: posenc.apply_rope(y, seq_axis=a, out=y),
                    memory=copyto_of(shape, dtype),
                    numpy=numpy_ref,
                    torch=torch_ref,
                    jit=_jax_rope(x, seq_axis),
                    note="numpy, torch and jit: out of place, as they are written",
                )
            )
    x = rng.standard_normal((1, 32, seq, 128)).astype(np.float32)
    cases.append(
        Case(
            name=f"apply_rope{x.shape} float32, new array",
            nbytes=x.nbytes,
            posenc=lambda x=x: posenc.apply_rope(x),
            memory=lambda x=x: np.copyto(np.empty_like(x), x),
            torch=_rope_torch(x, -2),
            jit=_jax_rope(x),
            note="allocation and page faults included on all sides",
        )
    )
    # one decoding step: the fixed cost of a call shows
    x = rng.standard_normal((1, 32, 1, 128)).astype(np.float32)
    out = np.empty_like(x)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32, offset=4096, out= (decoding)",
            nbytes=x.nbytes,
            posenc=lambda x=x, out=out: posenc.apply_rope(x, offset=4096, out=out),
            memory=copyto_of(x.shape, x.dtype),
            torch=_rope_torch(x, -2),
            jit=_jax_rope(x),
            note="torch, jit: the cached cos/sin of one position, as a KV-cache step uses them",
        )
    )
    # the same step by a plan built once (posenc.Rope): the options are not
    # read again
    plan = posenc.Rope(128)
    cases.append(
        Case(
            name="Rope(128).apply(1, 32, 1, 128) float32, offset=4096, out= (decoding)",
            nbytes=x.nbytes,
            posenc=lambda x=x, out=out: plan.apply(x, offset=4096, out=out),
            memory=copyto_of(x.shape, x.dtype),
            torch=_rope_torch(x, -2),
            jit=_jax_rope(x),
            note="posenc: a plan built once; torch, jit: as the row above",
        )
    )
    # a projection (NumPy's BLAS, its own threads) and the rotation, in turn,
    # as a NumPy model runs them: the kernel's threads must not hold the
    # cores BLAS wants next (see posenc/_openmp.py, GOMP_SPINCOUNT)
    tokens = 512 if quick else 2048
    h = rng.standard_normal((tokens, 1024)).astype(np.float32)
    w_q = rng.standard_normal((1024, 1024)).astype(np.float32)
    proj = np.empty((tokens, 1024), np.float32)
    heads_view = proj.reshape(1, tokens, 16, 64)

    def project():
        np.matmul(h, w_q, out=proj)

    def project_rotate():
        np.matmul(h, w_q, out=proj)
        posenc.apply_rope(heads_view, seq_axis=-3, out=heads_view)

    cases.append(
        Case(
            name=f"x @ W_q then apply_rope in place, {tokens} tokens x 16 heads x 64",
            nbytes=proj.nbytes,
            posenc=project_rotate,
            memory=project,
            note="memory: the BLAS product alone; posenc/memory - 1 is what the rotation adds",
        )
    )
    # how the time grows with the number of positions
    for n in [1024, 4096, 16384] if quick else [1024, 4096, 16384, 65536]:
        x = rng.standard_normal((1, 8, n, 128)).astype(np.float32)
        out = np.empty_like(x)
        cases.append(
            Case(
                name=f"apply_rope(1, 8, {n}, 128) float32, out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(x, out=out),
                memory=copyto_of(x.shape, x.dtype),
                torch=_rope_torch(x, -2),
                extra={"positions": n},
            )
        )
    return cases
