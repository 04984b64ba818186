"""posenc called on torch tensors: decoding, torch.compile, autograd."""

from __future__ import annotations

import sys

import numpy as np
from baselines_torch import _hf_rope_step, _hf_t5_bias
from common import Case, copyto_of, have_transformers, torch

import posenc


def torch_cases(quick):
    if torch is None:
        print("torch: torch is not installed, cases left out", file=sys.stderr)
        return []
    cases = []
    gen = torch.Generator().manual_seed(0)

    # one decoding step: a tensor in, a tensor out
    q = torch.randn(1, 32, 1, 128, generator=gen)
    out = torch.empty_like(q)
    step = _hf_rope_step(q, 4096)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 tensor, offset=4096 (decoding)",
            nbytes=q.numel() * 4,
            posenc=lambda: posenc.apply_rope(q, offset=4096),
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="posenc: tensor in, tensor out; torch: cos/sin of the position cached",
        )
    )
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 tensor, offset=4096, out= (decoding)",
            nbytes=q.numel() * 4,
            posenc=lambda: posenc.apply_rope(q, offset=4096, out=out),
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="torch: out of place, as it is written",
        )
    )
    traced = torch.compile(lambda: posenc.apply_rope(q, offset=4096), fullgraph=True)
    cases.append(
        Case(
            name="apply_rope(1, 32, 1, 128) float32 under torch.compile (decoding)",
            nbytes=q.numel() * 4,
            posenc=traced,
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="posenc: the operator torch.ops.posenc.apply_rope in a compiled graph",
        )
    )

    seq = 1024 if quick else 4096
    x = torch.randn(1, 32, seq, 128, generator=gen)
    whole = _hf_rope_step(x, 0)
    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32 tensor, new tensor",
            nbytes=x.numel() * 4,
            posenc=lambda: posenc.apply_rope(x),
            memory=lambda: torch.empty_like(x).copy_(x),
            torch=lambda: whole(x),
            note="allocation and page faults included on all sides",
        )
    )

    # autograd: the forward and backward of a training step's rotation
    xg = x.clone().requires_grad_()
    grad = torch.randn(x.shape, generator=gen)

    def posenc_train():
        posenc.apply_rope(xg).backward(grad)
        xg.grad = None

    def torch_train(rotate=whole):
        rotate(xg).backward(grad)
        xg.grad = None

    compiled_rotate = torch.compile(whole)

    def two_copies():  # a forward's and a backward's new tensor, each written once
        torch.empty_like(x).copy_(x)
        torch.empty_like(x).copy_(x)

    def compiled_train():
        torch_train(compiled_rotate)

    cases.append(
        Case(
            name=f"apply_rope(1, 32, {seq}, 128) float32, forward + backward",
            nbytes=2 * x.numel() * 4,
            posenc=posenc_train,
            memory=two_copies,
            torch=torch_train,
            compiled=compiled_train,
            note="backward: posenc the inverse rotation; torch autograd through the formula",
        )
    )

    n_heads, n = (16, 512) if quick else (16, 1024)
    table = torch.randn(32, n_heads, generator=gen, requires_grad=True)
    tgrad = torch.randn(n_heads, n, n, generator=gen)

    def posenc_t5_train():
        posenc.t5_bias(table, n).backward(tgrad)
        table.grad = None

    def torch_t5_train(bias=_hf_t5_bias):
        bias(table, n, n).backward(tgrad)
        table.grad = None

    compiled_bias = torch.compile(_hf_t5_bias)
    have_hf = have_transformers()
    cases.append(
        Case(
            name=f"t5_bias((32, {n_heads}) table, {n}) float32, forward + backward",
            nbytes=2 * n_heads * n * n * 4,
            posenc=posenc_t5_train,
            memory=lambda: tgrad.clone(),
            torch=torch_t5_train if have_hf else None,
            compiled=(lambda: torch_t5_train(compiled_bias)) if have_hf else None,
            note="backward: posenc a scatter-add by bucket; torch embedding's backward",
        )
    )
    return cases
