"""Complex-order word embeddings, Wang et al. 2020.

"Encoding word order in complex embeddings" (ICLR 2020): a word is not a
vector but a function of its position.  Word ``t`` at position ``pos`` is,
feature by feature,

    f(t, pos) = r[t] * exp(i * (w[t] * pos + theta[t]))

with three learned tables of shape ``(vocab, dim)``: the amplitude ``r``
(what the word means), the frequency ``w`` (how fast its phase turns with
the position) and the initial phase ``theta``.  The phase is linear in the
position, so a shift of every position by ``k`` turns each feature by
``w[t] * k`` whatever the position: relative order comes with the absolute
one.  The authors' code splits the result into its real and imaginary parts
(``amp * cos(phase)``, ``amp * sin(phase)``) and counts positions from 1; it
reduces ``theta`` modulo ``2 pi``, which changes no value.

The phase is formed in float64 (``pos * w``, then ``+ theta``) and each
part rounded once to the result dtype, so long positions keep their
accuracy.  The sine and cosine are posenc's own (the C core's, the same bits
on every SIMD path and thread count), not NumPy's: within ~1.5 ulp of the
sine and cosine of the float64 phase, so float32 and float16 parts are
within 1 ulp of the exact value of that phase's ``r cos`` and ``r sin``,
float64 parts within a few ulp.  One pass of C goes from the tables' rows
to the parts; tables of another dtype than the parts' have only the rows
the tokens use converted first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _complex_order, _validate
from ._interop import accepts_tensors
from ._typing import ArrayLike

__all__ = ["complex_order_embedding", "complex_order_embedding_grad"]


@accepts_tensors
def complex_order_embedding(
    token_ids: ArrayLike,
    positions: ArrayLike,
    amplitude: ArrayLike,
    frequency: ArrayLike,
    phase: ArrayLike,
    *,
    as_complex: bool = False,
) -> Any:
    """The complex-order embeddings ``r[t] exp(i (w[t] pos + theta[t]))``.

    Parameters
    ----------
    token_ids : array_like of int, any shape
        Rows of the tables, ``0 <= id < vocab``.
    positions : array_like of real, broadcastable to ``token_ids.shape``
        The position of each token (e.g. ``np.arange(1, n + 1)`` as the
        authors count, or ids from a sampler); ints or floats, finite.
    amplitude, frequency, phase : array_like of float, shape ``(vocab, dim)``
        The tables ``r``, ``w`` and ``theta``.
    as_complex : bool
        False (the default): the pair ``(real, imag)``.  True: one complex
        array (complex128 for float64 tables, complex64 otherwise).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    (real, imag) : tuple of numpy.ndarray of shape ``token_ids.shape + (dim,)``
        ``r cos(phi)`` and ``r sin(phi)`` with ``phi = w pos + theta``, in
        the tables' result dtype; or the complex array with `as_complex`.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> r, w, theta = np.ones((2, 3)), np.full((2, 3), np.pi / 2), np.zeros((2, 3))
    >>> real, imag = posenc.complex_order_embedding([0, 1], [1, 2], r, w, theta)
    >>> np.allclose(real, [[0, 0, 0], [-1, -1, -1]]), np.allclose(imag, [[1, 1, 1], [0, 0, 0]])
    (True, True)
    """
    as_complex = _validate.flag(as_complex, "as_complex")
    ids, pos, r, w, theta = _complex_order.checked(
        token_ids, positions, amplitude, frequency, phase
    )
    dtype = np.result_type(r.dtype, w.dtype, theta.dtype)
    part = np.dtype(np.float64 if dtype == np.float64 else np.float32) if as_complex else dtype
    return _complex_order.parts(ids, pos, r, w, theta, part, as_complex)


def complex_order_embedding_grad(
    token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag
):
    """The backward of :func:`complex_order_embedding` into its three tables.

    Parameters
    ----------
    token_ids, positions, amplitude, frequency, phase
        As :func:`complex_order_embedding` took them.
    grad_real, grad_imag : array_like of float, shape ``token_ids.shape + (dim,)``, or None
        The gradients of the loss with respect to the real and imaginary
        parts (None for zero).

    Returns
    -------
    (d_amplitude, d_frequency, d_phase) : tuple of numpy.ndarray of shape ``(vocab, dim)``
        In each table's dtype; a row no token uses is 0, a row used several
        times sums its uses:
        ``d r = gR cos(phi) + gI sin(phi)``,
        ``d theta = r (gI cos(phi) - gR sin(phi))``, ``d w = pos * d theta``.
    """
    return _complex_order.backward(
        token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag
    )
