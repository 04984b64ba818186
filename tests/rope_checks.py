"""RoPE's tolerance against the float64 reference, shared by test_rope and
test_properties (a module, not a test file: pytest does not collect it)."""

import numpy as np


def tolerance(x, dtype, positions_max=1.0):
    """Largest |kernel - float64 reference| allowed, elementwise.

    float32 computes with cos/sin rounded to float32 and two roundings per
    output (a few ulp of max|x|); float16 adds the rounding of the result to
    float16 (one float16 ulp of the value: the reference rounds the exact
    value, posenc a float32 one, which may fall on the other side of a
    midpoint; a rotated pair reaches sqrt(2) max|x|, a binade above max|x|
    at most); float64 differs from the reference by ulps of the angle,
    which grow with the position (the two readings of theta differ in their
    last bit).
    """
    scale = float(np.max(np.abs(np.asarray(x, dtype=np.float64)), initial=1e-30))
    if dtype == np.float64:
        return 8e-16 * scale * (1.0 + positions_max)
    if dtype == np.float32:
        return 4 * 2.0**-24 * scale * (1.0 + positions_max * 2.0**-26)
    return 2.0**-10 * np.sqrt(2.0) * scale


def assert_close_to_reference(actual, expected, x, positions_max=1.0):
    dtype = np.asarray(actual).dtype.type
    assert np.asarray(actual).dtype == np.asarray(expected).dtype
    tol = tolerance(x, dtype, positions_max)
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    assert err.max(initial=0.0) <= tol, f"max error {err.max()} > {tol}"
