"""The backward of the gathered relative terms in torch."""

from __future__ import annotations

import numpy as np
from common import Case, _gemm_floor, _rmw_of, torch

import posenc


def _part_grad_gemms(summed, left, table):
    """The two GEMMs of one gathered part's backward, as (left, right) pairs
    of ``left @ right^T`` for _gemm_floor: with `summed` (..., rows, columns)
    the incoming gradient summed by column of the part's products (its
    scattered gradient, one column per row of the table), the gradient of
    the part's left operand ``summed @ table`` and the table's
    ``summed^T @ left``."""
    return [
        (summed, np.swapaxes(table, -1, -2)),
        (np.swapaxes(summed, -1, -2), np.swapaxes(left, -1, -2)),
    ]


def relative_grad_cases(quick):
    """The backward of the gathered terms in torch: posenc's operator (the
    C scatter of the incoming gradient by column, then BLAS) against
    autograd through the same term as transformers and the authors write
    it.  Backward only: both forwards are recorded once.

    The floor of Transformer-XL's and DeBERTa's backward is their GEMMs
    alone (_part_grad_gemms, float32) and then one read of the incoming
    gradient (its sum).  Transformer-XL: grad_q = G_r @ r and grad_r = G_r^T
    @ q, with G_r the gradient summed per row of the table r, as many
    columns for each query as it has keys (one a score, the gradient's own
    values stand in for it) against k_len rows of r; bias's gradient, a sum
    of grad_q's rows, is left out.  DeBERTa: the same two for c2p (G_c2p
    the gradient of each query summed by bucket, (q_len, 2 * buckets) a
    head: grad_q = G_c2p @ pos_key, grad_pos_key = G_c2p^T @ q) and for p2c
    (by key: grad_k = G_p2c @ pos_query, grad_pos_query = G_p2c^T @ k), the
    division by the scale left out.  Shaw's backward keeps the
    read-modify-write of the gradient."""
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

    def read():
        grad.numpy().sum()

    nq, nk, nr, npk, npq = (x.detach().numpy() for x in (q, k, r, pk, pq))
    sums = rng.standard_normal((2, heads, n, 2 * span)).astype(np.float32)
    floors = {
        "xl_position_term": _gemm_floor(_part_grad_gemms(grad.numpy(), nq, nr[:, :n]), read),
        "deberta_attention_bias (256 buckets)": _gemm_floor(
            _part_grad_gemms(sums[0], nq, npk) + _part_grad_gemms(sums[1], nk, npq),
            read,
        ),
    }

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
            memory=floors.get(name, rmw),
            torch=backward(theirs, inputs),
            note=(
                "memory: the GEMMs of the backward + one read of the gradient; target <= 1.3x"
                if name in floors
                else "memory: the read-modify-write of the gradient"
            )
            + f"; torch: autograd through {how}",
        )
        for name, (mine, theirs, inputs, how) in terms.items()
    ]
