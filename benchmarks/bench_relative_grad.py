"""The backward of the gathered relative terms in torch."""

from __future__ import annotations

import numpy as np
from common import Case, _rmw_of, torch

import posenc


def relative_grad_cases(quick):
    """The backward of the gathered terms in torch: posenc's operator (the
    C scatter of the incoming gradient by column, then BLAS) against
    autograd through the same term as transformers and the authors write
    it.  Backward only: both forwards are recorded once."""
    if torch is None:
        return []
    from transformers.models.deberta_v2 import modeling_deberta_v2 as m
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    rng = np.random.default_rng(0)
    n, heads, d, span = (512, 12, 64, 256) if quick else (1024, 16, 64, 256)

    def t(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_()

    q, k, r, bias = t(1, heads, n, d), t(1, heads, n, d), t(heads, 2 * n, d), t(heads, d)
    pk, pq, a_k = t(heads, 2 * span, d), t(heads, 2 * span, d), t(33, d)
    grad = torch.from_numpy(rng.standard_normal((1, heads, n, n)).astype(np.float32))
    rmw = _rmw_of(grad.numpy())

    def backward(term, inputs):
        return lambda: torch.autograd.grad(term, inputs, grad, retain_graph=True)

    ql, kl = q.reshape(heads, n, d), k.reshape(heads, n, d)
    rp = m.build_relative_position(ql, kl, bucket_size=span, max_position=512)
    pos = torch.clamp(rp + span, 0, 2 * span - 1).squeeze(0).expand(heads, n, n)
    scale = m.scaled_size_sqrt(ql, 3)
    c2p = torch.gather(torch.bmm(ql, pk.transpose(-1, -2)), -1, pos)
    p2c = torch.gather(torch.bmm(kl, pq.transpose(-1, -2)), -1, pos).transpose(-1, -2)
    idx = torch.clamp(torch.arange(n)[None, :] - torch.arange(n)[:, None], -16, 16) + 16
    terms = {
        "xl_position_term": (
            posenc.xl_position_term(q, r, bias=bias),
            XLNetRelativeAttention.rel_shift_bnij(
                torch.einsum("bnid,njd->bnij", q + bias[:, None], r), klen=n
            ),
            (q, r, bias),
            "XLNet's einsum + rel_shift_bnij",
        ),
        "deberta_attention_bias (256 buckets)": (
            posenc.deberta_attention_bias(
                q, k, pk, pq, position_buckets=span, max_relative_positions=512
            ),
            ((c2p / scale + p2c / scale).reshape(1, heads, n, n)),
            (q, k, pk, pq),
            "transformers' c2p and p2c gathers",
        ),
        "shaw_key_term (clip 16)": (
            posenc.shaw_key_term(q, a_k, max_distance=16),
            torch.matmul(q[0].permute(1, 0, 2), a_k[idx].transpose(1, 2)).permute(1, 0, 2)[None],
            (q, a_k),
            "tensor2tensor's relations_keys gather + matmul",
        ),
    }
    return [
        Case(
            name=f"{name}: backward, gradient {tuple(grad.shape)}",
            nbytes=grad.numel() * 4,
            posenc=backward(mine, inputs),
            memory=rmw,
            torch=backward(theirs, inputs),
            note=f"memory: the read-modify-write of the gradient; torch: autograd through {how}",
        )
        for name, (mine, theirs, inputs, how) in terms.items()
    ]
