"""Float64 NumPy twins of CoPE, complex-order embeddings, the position-id
samplers and Llama 4's chunked mask: the tests' oracle.

Written as the papers and the authors' code state the formulas, one element
at a time where that reads best; slow, and never called by the library.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "chunked_causal_mask",
    "complex_order_embedding",
    "cope_bias",
    "irope_rope_layers",
    "pose_position_ids",
    "randomized_position_ids",
]


def _sigmoid(x: float) -> float:
    """1 / (1 + e^-x), written on the side where the exponential cannot overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))  # exp(-inf) = 0: a masked key


def cope_bias(
    query: Any,
    attn_logits: Any,
    pos_emb: Any,
    *,
    causal: bool = True,
    q_offset: Optional[int] = None,
) -> NDArray[np.float64]:
    """CoPE with `pos_emb` of shape (npos_max, head_dim): per query row,
    gates, their sums from each key to the end, and the interpolation."""
    q = np.asarray(query, dtype=np.float64)
    a = np.asarray(attn_logits, dtype=np.float64)
    e = np.asarray(pos_emb, dtype=np.float64)
    npos = e.shape[0]
    q_len, k_len = a.shape[-2:]
    off = k_len - q_len if q_offset is None else q_offset
    out = np.zeros(a.shape)
    for lead in np.ndindex(*a.shape[:-2]):
        for i in range(q_len):
            gates = [
                0.0 if causal and j > off + i else _sigmoid(a[lead + (i, j)]) for j in range(k_len)
            ]
            logits_int = [float(np.dot(q[lead + (i,)], e[p])) for p in range(npos)]
            for j in range(k_len):
                p = min(sum(gates[j:]), npos - 1)
                lo, hi = math.floor(p), math.ceil(p)
                frac = p - lo
                out[lead + (i, j)] = logits_int[hi] * frac + logits_int[lo] * (1.0 - frac)
    return out


def complex_order_embedding(
    token_ids: Any, positions: Any, amplitude: Any, frequency: Any, phase: Any
) -> NDArray[np.complex128]:
    """r[t] * exp(i (w[t] pos + theta[t])) as a complex128 array."""
    ids = np.asarray(token_ids)
    pos = np.broadcast_to(np.asarray(positions, dtype=np.float64), ids.shape)
    r = np.asarray(amplitude, dtype=np.float64)
    w = np.asarray(frequency, dtype=np.float64)
    theta = np.asarray(phase, dtype=np.float64)
    out = np.zeros(ids.shape + (r.shape[1],), dtype=np.complex128)
    for idx in np.ndindex(*ids.shape):
        t = int(ids[idx])
        out[idx] = r[t] * np.exp(1j * (w[t] * pos[idx] + theta[t]))
    return out


def randomized_position_ids(n: int, max_len: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """One row of Ruoss et al.'s ids: a sorted draw without replacement."""
    draw = rng.choice(max_len, size=n, replace=False, shuffle=False)
    return np.array(sorted(int(x) for x in draw), dtype=np.int64)


def pose_position_ids(n: int, target_len: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """One row of PoSE's ids as train_pose.py forms them (two chunks, the
    first chunk's skip 0), with the numpy draws in its order."""
    len_chunk = n
    lt1 = 0
    rt1 = int(rng.integers(1, (len_chunk + 1) // 2 + 1))  # randint(1, (L + 1) // 2)
    lt = 0
    rt = int(rng.integers(lt, target_len - n + 1))  # randint(0, target - L)
    ids = list(range(n))
    for k in range(rt1 - lt1):
        ids[k] += lt
    for k in range(rt1 - lt1, n):
        ids[k] += rt
    return np.array(ids, dtype=np.int64)


def chunked_causal_mask(
    q_len: int, k_len: int, chunk_size: int, q_offset: int
) -> NDArray[np.bool_]:
    """mask[i][j]: key j is at or before query q_offset + i, in its chunk."""
    out = np.zeros((q_len, k_len), dtype=bool)
    for i in range(q_len):
        qi = q_offset + i
        for j in range(k_len):
            out[i, j] = j <= qi and j // chunk_size == qi // chunk_size
    return out


def irope_rope_layers(
    num_hidden_layers: int, no_rope_layers: Optional[List[int]], interval: int
) -> Tuple[List[bool], List[int]]:
    """Llama 4's RoPE flags and NoPE indices: every `interval`-th layer
    (1-based) is NoPE unless `no_rope_layers` lists the flags."""
    if no_rope_layers:
        flags = [bool(v) for v in no_rope_layers[:num_hidden_layers]]
    else:
        flags = [not ((i + 1) % interval == 0) for i in range(num_hidden_layers)]
    return flags, [i for i, f in enumerate(flags) if not f]
