"""Absolute sinusoidal position encoding (Vaswani et al., 2017): the Python
side of src/sinusoid.c."""

from __future__ import annotations

from . import _core
from . import _validate as v
from ._frequencies import inv_frequencies
from ._interop import accepts_tensors

_LAYOUTS = _core.SINUSOID_LAYOUTS


@accepts_tensors
def sinusoid(positions, dim, *, base=10000.0, layout="interleaved", dtype=None, out=None):
    """The sinusoidal position table of "Attention Is All You Need".

    Parameters
    ----------
    positions : int or array_like
        An int ``n`` for positions ``0..n-1``, or an array of positions of any
        shape (ints or floats, e.g. ``k * np.arange(n)`` for the
        skip-position attack, or fractional positions to interpolate).
        Positions must be finite.
    dim : int
        Width of the table, a positive even number.
    base : float
        The wavelength base; frequency ``i`` is ``base ** (-2i/dim)``.
    layout : {"interleaved", "concat"}
        ``"interleaved"`` (the paper, Hugging Face): ``PE[p, 2i] = sin(p w_i)``,
        ``PE[p, 2i+1] = cos(p w_i)``.  ``"concat"``: all sines, then all cosines.
    dtype : float16, bfloat16, float32 or float64, optional
        float32 by default, or the dtype of `out` when that is given.
        ``"bfloat16"`` (or ``"bf16"``, or ml_dtypes' ``bfloat16``) gives an
        array of ml_dtypes' bfloat16 (``pip install 'posenc[bfloat16]'``).
    out : ndarray, optional
        Array of shape ``positions.shape + (dim,)`` and the given dtype to write into.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of shape ``positions.shape + (dim,)`` (``(n, dim)`` for an int).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: `dim` not a positive even int, positions not finite
        numbers, an unknown `layout`, `out` of another shape or dtype.

    Notes
    -----
    Angles are formed and reduced in float64 and rounded once to `dtype`:
    float32 tables are within 1 ulp of the float64 values at positions up to
    2**24 and beyond (float16 and bfloat16 tables too, in their own ulps).

    Examples
    --------
    >>> table = posenc.sinusoid(3, 4, dtype="float64")
    >>> table.shape
    (3, 4)
    >>> freq = 10000.0 ** (-np.arange(0, 4, 2) / 4)
    >>> np.allclose(table[:, 0::2], np.sin(np.outer(np.arange(3), freq)))
    True
    >>> posenc.sinusoid(np.array([[0.5, 2.0]]), 4, layout="concat").shape
    (1, 2, 4)
    """
    dim = v.even_dim(dim, "dim")
    base = v.real(base, "base", positive=True)
    layout_code = _LAYOUTS[v.choice(layout, "layout", tuple(_LAYOUTS))]
    dtype = v.result_dtype(dtype, out, bfloat16=True)
    v.shape_size((dim // 2,), "dim (its dim // 2 frequencies)")

    def table(shape):  # made unless out is given (it may be larger than memory: a memmap)
        if out is None:
            v.shape_size(shape + (dim,), "positions and dim", dtype.itemsize)

    pos, shape = v.positions(positions, "positions", result=table)
    result, rows, finish = v.output(out, shape + (dim,), dtype, "out")
    _core.sinusoid(pos, inv_frequencies(dim, base), v.for_kernel(rows), layout_code)
    finish()
    return result
