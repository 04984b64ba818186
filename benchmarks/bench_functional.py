"""KERPLE, Sandwich, FIRE and CoPE added into the scores.

Each case adds one bias into float32 scores ``(1, heads, n, n)``, in place,
beside ``memory``, the read-modify-write of the same bytes (what any add into
them costs at least), the float64 NumPy twins of ``posenc._reference_functional``
(CoPE's, one element at a time, is left out), and the authors' code written
in torch, eagerly and under torch.compile: KERPLE's ``ParallelKerpleLog`` /
``ParallelKerplePower``, NeMo's ``SandwichRelativePositionEmbedding``, the
FIRE module of the paper's appendix with its MLP, and ``CoPE.forward`` of
facebookresearch/RAM (``projects/cope``), each added into the scores with
``add_``.
"""

from __future__ import annotations

import numpy as np
from common import Case, _rmw_of, torch

import posenc
from posenc import _reference_functional as rf


def _kerple_torch(r1, r2, n, kind):
    """The authors' KERPLE bias for n tokens (the lower triangle's distances,
    0 above it for their causal mask to hide): (heads, n, n)."""
    diff = torch.tril(torch.arange(n)[:, None] - torch.arange(n)[None, :]).to(torch.float32)
    if kind == "log":  # ParallelKerpleLog: -bias_p * log(1 + bias_a * diff)
        return -r1 * torch.log1p(r2 * diff)
    return -r1 * diff.pow(r2)  # ParallelKerplePower: -bias_a * diff ** bias_p


def _sandwich_torch(heads, n, hidden):
    """NeMo's SandwichRelativePositionEmbedding.forward (causal: tril'd
    distances): (heads, n, n)."""
    rel = torch.tril((torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs())
    inv_freq = 1.0 / (10000 ** (2 * torch.arange(1, hidden / 2 + 1) / hidden))
    bias = torch.sum((rel[:, :, None].repeat(1, 1, len(inv_freq)) * inv_freq).cos(), axis=2)
    bias = bias.repeat(heads, 1, 1)
    scales = torch.arange(1, heads + 1, 1)[:, None, None]
    return (bias - hidden / 2) / (scales * 8 / heads)


def _fire_torch(w1, b1, w2, b2, c, init_l, n, eps=1e-6):
    """The FIRE module's forward (Li et al., 2024, appendix), its MLP as
    torch ops: (1, heads, n, n)."""
    positions = torch.arange(n, dtype=torch.float32)
    rel_distance = positions[:, None] - positions[None, :]
    threshold = torch.abs(init_l)
    pos_normalizer = torch.max(positions, threshold)[:, None]
    rel_distance = torch.log(torch.abs(c * rel_distance) + 1)
    pos_normalizer = torch.log(torch.abs(c * pos_normalizer) + 1) + eps
    x = (rel_distance / pos_normalizer).unsqueeze(-1)
    hidden = torch.relu(torch.nn.functional.linear(x, w1, b1))
    return torch.nn.functional.linear(hidden, w2, b2).unsqueeze(0).permute(0, 3, 1, 2)


def _cope_torch(query, attn_logits, pos_emb, npos_max):
    """CoPE.forward of facebookresearch/RAM projects/cope (pos_emb of shape
    (1, head_dim, npos_max), attn_logits with the causal mask's -inf)."""
    pos = torch.sigmoid(attn_logits).flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos_max - 1)
    floor = pos.floor()
    logits_int = torch.matmul(query, pos_emb)  # the logits of the integer positions
    ceil_logits = logits_int.gather(-1, pos.ceil().long())
    floor_logits = logits_int.gather(-1, floor.long())
    w = pos - floor
    return ceil_logits * w + floor_logits * (1 - w)


def functional_cases(quick):
    heads, n = (16, 512) if quick else (16, 1024)
    width, dim, npos, head_dim = 32, 64, 64, 64
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((1, heads, n, n)).astype(np.float32)
    r1 = rng.uniform(0.5, 2.0, heads)
    r2 = rng.uniform(0.2, 1.5, heads)
    fire = dict(
        w1=rng.normal(size=(width, 1)) * 0.5,
        b1=rng.normal(size=width) * 0.1,
        w2=rng.normal(size=(heads, width)) * 0.2,
        b2=rng.normal(size=heads) * 0.1,
        c=0.1,
    )
    query = rng.standard_normal((1, heads, n, head_dim)).astype(np.float32) * 0.3
    logits = rng.standard_normal((1, heads, n, n)).astype(np.float32)
    pos_emb = rng.standard_normal((npos, head_dim)).astype(np.float32) * 0.3
    shape = f"(1, {heads}, {n}, {n})"
    rmw = _rmw_of(scores)
    t = {}
    if torch is not None:
        ts = torch.from_numpy(scores)
        tr1 = torch.tensor(r1, dtype=torch.float32)[:, None, None]
        tr2 = torch.tensor(r2, dtype=torch.float32)[:, None, None]
        tf = {k: torch.tensor(v, dtype=torch.float32) for k, v in fire.items()}
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        tq = torch.from_numpy(query)
        tlogits = torch.from_numpy(logits).masked_fill(future, float("-inf"))
        temb = torch.from_numpy(pos_emb.T[None].copy())  # the authors' (1, head_dim, npos)
        t = {
            "log": lambda: ts.add_(_kerple_torch(tr1, tr2, n, "log")),
            "power": lambda: ts.add_(_kerple_torch(tr1, tr2, n, "power")),
            "sandwich": lambda: ts.add_(_sandwich_torch(heads, n, dim)),
            "fire": lambda limit: ts.add_(
                _fire_torch(tf["w1"], tf["b1"], tf["w2"], tf["b2"], tf["c"], limit, n)
            ),
            "cope": lambda: ts.add_(_cope_torch(tq, tlogits, temb, npos)),
        }
    kerple = [
        Case(
            name=f"kerple_bias({heads} heads, {kind}, {n}, scores=) float32 {shape}",
            nbytes=scores.nbytes,
            posenc=lambda kind=kind: posenc.kerple_bias(r1, r2, n, kind=kind, scores=scores),
            memory=rmw,
            numpy=lambda kind=kind: rf.kerple_bias(r1, r2, n, kind=kind, scores=scores),
            torch=t.get(kind),
            note=f"memory: read-modify-write of the scores; torch: the authors' "
            f"ParallelKerple{kind.title()} bias, scores.add_(bias)",
        )
        for kind in ("log", "power")
    ]
    sandwich = Case(
        name=f"sandwich_bias({heads}, {n}, dim={dim}, scores=) float32 {shape}",
        nbytes=scores.nbytes,
        posenc=lambda: posenc.sandwich_bias(heads, n, dim=dim, scores=scores),
        memory=rmw,
        numpy=lambda: rf.sandwich_bias(heads, n, dim=dim, scores=scores),
        torch=t.get("sandwich"),
        note="torch: NeMo's SandwichRelativePositionEmbedding (hidden_size = dim)",
    )
    # threshold 512: the later half of the rows in NumPy tiles; 2048: every
    # query before it, every row from one value per distance
    fires = [
        Case(
            name=f"fire_bias(width {width}, {heads} heads, L {limit:.0f}, {n}, scores=) float32 "
            + shape,
            nbytes=scores.nbytes,
            posenc=lambda limit=limit: posenc.fire_bias(
                **fire, threshold=limit, q_len=n, scores=scores
            ),
            memory=rmw,
            numpy=lambda limit=limit: rf.fire_bias(*fire.values(), limit, n, scores=scores),
            torch=(lambda limit=limit: t["fire"](torch.tensor(limit))) if t else None,
            note="torch: the paper's FIRE module (MLP as F.linear, relu)",
        )
        for limit in (512.0, 2048.0)
    ]
    # a wide MLP, every row from one value per distance: the hidden units one
    # at a time over a tile whose size does not shrink with the width
    wide_width = 4096
    wide = dict(
        w1=rng.normal(size=(wide_width, 1)) * 0.5,
        b1=rng.normal(size=wide_width) * 0.1,
        w2=rng.normal(size=(1, wide_width)) * 0.02,
        b2=rng.normal(size=1) * 0.1,
        c=0.1,
    )
    wide_fire = Case(
        name=f"fire_bias(width {wide_width}, 1 head, L {2.0 * n:.0f}, {n}) float32 (1, {n}, {n})",
        nbytes=n * n * 4,
        posenc=lambda: posenc.fire_bias(**wide, threshold=2.0 * n, q_len=n),
        note="a wide MLP by distance (n 1024: 168 ms while the tiles shrank with the width, "
        "22 ms with tiles of a size the width does not change)",
    )
    cope = Case(
        name=f"cope_bias(npos {npos}, head_dim {head_dim}, scores=) float32 {shape}",
        nbytes=scores.nbytes,
        posenc=lambda: posenc.cope_bias(query, logits, pos_emb, scores=scores),
        memory=rmw,
        torch=t.get("cope"),
        note="torch: CoPE.forward of facebookresearch/RAM, masked logits; numpy: left out",
    )
    return kerple + [sandwich] + fires + [wide_fire, cope]
