"""posenc called on torch tensors: decoding, torch.compile, autograd, and
posenc.torch's RotaryEmbedding stepping at near and far positions."""

from __future__ import annotations

import sys

import numpy as np
from baselines_torch import _hf_rope_step, _hf_t5_bias
from common import Case, copyto_of, have_transformers, torch

import posenc


def _peak_mib(fn):
    """The peak resident memory `fn()` adds, in MiB (Linux: the high-water
    mark reset through /proc/self/clear_refs first), or None elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # pragma: no cover - depends on the machine
        return None

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024  # kB
        return None

    before = status("VmRSS:")
    fn()
    peak = status("VmHWM:")
    return None if before is None or peak is None else max(0.0, peak - before)


def _rotary_step_cases():
    """One decoding step of posenc.torch.RotaryEmbedding(128) at position 10
    and at 10**7: the time of a step after a first one (the tables a module
    keeps looked up, or the ids past them computed alone), and the peak
    memory of the first step of a new module; torch: transformers'
    LlamaRotaryEmbedding at the same position."""
    import posenc.torch as pt

    x = torch.zeros(1, 1, 128)
    cases = []
    for position in (10, 10**7):
        ids = torch.tensor([[position]])
        module = pt.RotaryEmbedding(128)
        module(x, ids)
        peak = _peak_mib(lambda ids=ids: pt.RotaryEmbedding(128)(x, ids))
        theirs = None
        if have_transformers():
            from transformers import LlamaConfig
            from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

            hf = LlamaRotaryEmbedding(LlamaConfig(hidden_size=4096, num_attention_heads=32))

            def theirs(hf=hf, ids=ids):
                with torch.no_grad():
                    return hf(x, ids)

        peak_text = "—" if peak is None else f"{peak:.1f} MiB"
        cases.append(
            Case(
                name=f"RotaryEmbedding(128) decoding step at position {position:.0e} float32",
                nbytes=2 * 128 * 4,
                posenc=lambda module=module, ids=ids: module(x, ids),
                torch=theirs,
                note=f"peak memory of a new module's first step: {peak_text}; torch: "
                "transformers' LlamaRotaryEmbedding",
                extra={"peak_mib": peak, "position": position},
            )
        )
    return cases


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
    plan = posenc.Rope(128)
    cases.append(
        Case(
            name="Rope(128).apply(1, 32, 1, 128) float32 tensor, offset=4096 (decoding)",
            nbytes=q.numel() * 4,
            posenc=lambda: plan.apply(q, offset=4096),
            memory=copyto_of(tuple(q.shape), np.float32),
            torch=lambda: step(q),
            note="posenc: a plan built once, tensor in, tensor out; torch: eager rotation by "
            "the cos/sin of the position cached",
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
    cases.extend(_rotary_step_cases())
    return cases
