"""The sinusoid: tables into out=, a new array, uneven positions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from baselines_jax import _jax_sinusoid
from common import Case, torch

import posenc
from posenc import reference


def parallel_fill(out, threads=2):
    """`out` filled by `threads` threads, each `ndarray.fill` on its share of
    the rows: the memory floor of a table made on as many threads."""
    pool = ThreadPoolExecutor(threads)
    bounds = np.linspace(0, len(out), threads + 1).astype(int)
    parts = [out[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def fill():
        list(pool.map(lambda part: part.fill(0.5), parts))

    return fill


def sinusoid_cases(quick):
    n, dim = (16384, 256) if quick else (65536, 256)
    cases = []
    for dtype in ("float32", "float16", "float64"):
        out = np.empty((n, dim), dtype)
        tdtype = getattr(torch, dtype) if torch is not None else None

        def hf_torch(n=n, dim=dim, tdtype=tdtype):
            # transformers' sinusoidal table (create_sinusoidal_embeddings)
            pos = torch.arange(n, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-np.log(10000.0) / dim))
            table = torch.empty(n, dim, dtype=torch.float32)
            table[:, 0::2] = torch.sin(pos * div)
            table[:, 1::2] = torch.cos(pos * div)
            return table.to(tdtype)

        cases.append(
            Case(
                name=f"sinusoid({n}, {dim}) {dtype}, out=",
                nbytes=out.nbytes,
                posenc=lambda out=out, n=n, dim=dim: posenc.sinusoid(n, dim, out=out),
                memory=lambda out=out: out.fill(0.5),
                numpy=lambda n=n, dim=dim, dtype=dtype: reference.sinusoid(n, dim, dtype=dtype),
                torch=hf_torch if torch is not None else None,
                jit=_jax_sinusoid(n, dim, dtype),
            )
        )
    cases.append(
        Case(
            name=f"sinusoid({n}, {dim}) float32, new array",
            nbytes=n * dim * 4,
            posenc=lambda: posenc.sinusoid(n, dim),
            memory=lambda: np.empty((n, dim), np.float32).fill(0.5),
            note="allocation and page faults included on both sides",
        )
    )
    for dtype in ("float32", "float16"):
        big = np.empty((262144, dim), dtype)
        cases.append(
            Case(
                name=f"sinusoid(262144, {dim}) {dtype}, out=, {big.nbytes >> 20} MiB",
                nbytes=big.nbytes,
                posenc=lambda big=big: posenc.sinusoid(262144, dim, out=big),
                memory=parallel_fill(big),
                note="memory: two threads each fill half of out (ndarray.fill)",
            )
        )
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 2**20, n)
    out = np.empty((n, dim), np.float32)
    cases.append(
        Case(
            name=f"sinusoid(random {n} positions, {dim}) float32, out=",
            nbytes=out.nbytes,
            posenc=lambda: posenc.sinusoid(pos, dim, out=out),
            memory=lambda: out.fill(0.5),
            numpy=lambda: reference.sinusoid(pos, dim),
            note="uneven positions: every element computed directly",
        )
    )
    return cases
