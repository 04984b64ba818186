"""The frequencies ``base ** (-2i/dim)`` that the sinusoid and RoPE share."""

from __future__ import annotations

import numpy as np


def frequency_powers(dim, base):
    """``base ** (2i/dim)`` for ``i < dim/2``, in float64."""
    return base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def inv_frequencies(dim, base):
    """``base ** (-2i/dim)`` for ``i < dim/2``, in float64, as transformers forms them."""
    return 1.0 / frequency_powers(dim, base)
