"""Contextual position encoding (CoPE), Golovneva et al. 2024.

"Contextual Position Encoding: Learning to Count What's Important"
(arXiv:2405.18719; the authors' code is facebookresearch/RAM,
``projects/cope``).  A position is not the number of tokens between a query
and a key but a count the model chooses: every key ``t`` the query ``i``
sees opens a gate ``g_it = sigmoid(a_it)`` (``a`` the attention logits), and
the position of key ``j`` is the sum of the gates from ``j`` to the query,

    p_ij = min(sum_{t=j}^{i} g_it, npos_max - 1).

Positions are fractional, so the logits of the integer positions,
``z_i[p] = q_i . e[p]``, are interpolated between ``floor(p_ij)`` and
``ceil(p_ij)``, and ``z_i(p_ij)`` is added to the attention scores.

The argument names are those of the authors' module, ``CoPE.forward(query,
attn_logits)`` with its parameter ``pos_emb``: a user of that module passes
the same three things.  The gradient follows the authors' formula as torch
autograd differentiates it: ``floor`` and ``ceil`` are indices without a
gradient, the interpolation weight ``w = p - floor(p)`` carries the gradient
of ``p``, and ``clamp`` passes it only where ``p <= npos_max - 1``.

Everything is computed in float64 and rounded once to the result dtype.  The
forward runs in C (``posenc._core.cope``, ``posenc._cope.bias_kernel``) with
the bits of its NumPy formula (``posenc._cope.bias_numpy``); so does the
backward's pass over the scores (``posenc._core.cope_grad``,
``posenc._cope.grad_kernel``, with the bits of ``posenc._cope.grad_numpy``),
whose gradient of the products ``z`` then gives those of the queries and the
table by two float64 matrix products.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _cope, _validate
from ._interop import accepts_tensors
from ._typing import Array, ArrayLike, NDArray

__all__ = ["cope_bias", "cope_bias_grad"]


@accepts_tensors
def cope_bias(
    query: ArrayLike,
    attn_logits: ArrayLike,
    pos_emb: ArrayLike,
    *,
    causal: bool = True,
    q_offset: Optional[int] = None,
    scores: Optional[Array] = None,
) -> NDArray[Any]:
    """CoPE's position logits, ``z_i(p_ij)``, or their add into `scores`.

    Parameters
    ----------
    query : array_like of float, shape ``(..., q_len, head_dim)``
        The queries, e.g. ``(batch, heads, q_len, head_dim)``.
    attn_logits : array_like of float, shape ``(..., q_len, k_len)``
        The attention logits the gates come from (the authors pass
        ``q k^T / sqrt(head_dim)`` with the causal mask's ``-inf`` already
        added); the leading axes are query's.  ``-inf`` (a masked key) gives
        a gate of 0; nan and ``+inf`` are refused.
    pos_emb : array_like of float, shape ``(npos_max, head_dim)``
        The embeddings of the integer positions ``0 .. npos_max - 1``
        (x-transformers' ``CoPE.pos_emb``).  The authors' parameter, of
        shape ``(1, head_dim, npos_max)``, is taken as it is.
    causal : bool
        True (the default): the gates of the keys after the query (key
        ``j > q_offset + i``) are 0, as the authors' causal mask makes them,
        whatever `attn_logits` holds there.  False: every key counts (an
        encoder, or a mask already in `attn_logits` as ``-inf``).
    q_offset : int, optional
        Position of the first query among the keys; defaults to
        ``k_len - q_len`` (the last queries of the sequence, as when
        decoding with a cache).
    scores : ndarray of shape ``(..., q_len, k_len)``, optional
        Attention scores to add the position logits into, in place; returned.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    numpy.ndarray of shape ``(..., q_len, k_len)``
        In the result dtype of the three inputs (`scores`' own with
        `scores`).  A key after the query gets ``z_i(0)`` (its gates sum
        to 0), as in the authors' module; the causal mask removes it.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> q = np.ones((1, 1, 3, 2))  # (batch, heads, q_len, head_dim)
    >>> logits = np.zeros((1, 1, 3, 3))  # every gate sigmoid(0) = 1/2
    >>> pos_emb = np.zeros((4, 2))
    >>> pos_emb[:, 0] = [0, 1, 2, 3]  # q . e[p] = p
    >>> posenc.cope_bias(q, logits, pos_emb)[0, 0]  # p_ij = (i - j + 1) / 2
    array([[0.5, 0. , 0. ],
           [1. , 0.5, 0. ],
           [1.5, 1. , 0.5]])
    """
    a = _cope.Args(query, attn_logits, pos_emb, causal, q_offset, check_logits=False)
    if scores is not None:
        if not isinstance(scores, np.ndarray):
            raise TypeError(f"scores must be a numpy.ndarray, not {type(scores).__name__}")
        if scores.shape != a.logits.shape:
            raise ValueError(f"scores must have shape {a.logits.shape}, got {scores.shape}")
        if scores.dtype.kind != "f":
            raise TypeError(f"scores must be a float array, not dtype {scores.dtype}")
        _validate.writeable(scores, "scores")
    out = _cope.bias_kernel(a, scores)
    return _cope.bias_numpy(a, scores) if out is None else out


def cope_bias_grad(query, attn_logits, pos_emb, grad, *, causal=True, q_offset=None):
    """The backward of :func:`cope_bias`.

    Parameters
    ----------
    query, attn_logits, pos_emb, causal, q_offset
        As :func:`cope_bias` took them.
    grad : array_like of float, shape ``(..., q_len, k_len)``
        The gradient of the loss with respect to the position logits.

    Returns
    -------
    (d_query, d_attn_logits, d_pos_emb) : tuple of numpy.ndarray
        Shaped as the inputs (``d_pos_emb`` in the layout `pos_emb` came
        in), each in its input's dtype.  As torch autograd of the authors'
        formula: the gradient of ``p`` flows through the interpolation
        weight only, is 0 where ``p`` was clipped (``p > npos_max - 1``) and
        at the keys after the query, and reaches ``attn_logits`` through
        ``sigmoid'``.
    """
    return _cope.bias_grad(query, attn_logits, pos_emb, grad, causal=causal, q_offset=q_offset)
