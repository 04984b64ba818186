"""T5's bucket thresholds in exact arithmetic.

T5 buckets a distance ``a = |d|`` (one direction of ``per_dir`` buckets, the
first ``exact = per_dir // 2`` of them one distance each) as

    exact + floor(N * ln(a / exact) / ln(max_distance / exact)),   N = per_dir - exact,

clipped to the last bucket.  The bucket steps to ``exact + k`` at the
smallest integer ``a`` with ``a**N >= exact**(N - k) * max_distance**k``:

    t_k = ceil(exact * (max_distance / exact) ** (k / N)),   k = 1 .. N - 1.

The thresholds are computed here once per configuration (and cached), in
float64 where that decides them beyond doubt, and otherwise in 80-digit
decimal arithmetic with an exact integer test for the case where the real
threshold is itself an integer.  The C kernels then count the thresholds at
or below each distance.  Deciding by exact arithmetic makes the bucket of a
distance the one the formula defines; transformers evaluates it in float32,
which agrees on T5's configurations and can land on the other side of a
boundary in rare unusual ones.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import lru_cache

import numpy as np

# relative error bound of the float64 estimate of t_k (the exponent is at
# most ln(2**62) ~ 43, its rounding amplified by exp), with a wide margin
_FLOAT64_DOUBT = 1e-12


def layout(bidirectional, num_buckets):
    """``(per_dir, exact)``: buckets of one direction and exact buckets."""
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    return per_dir, per_dir // 2


def _exact_threshold(k, n, exact, max_distance):
    """t_k in decimal arithmetic, with an integer test at a tie."""
    with localcontext() as ctx:
        ctx.prec = 80
        y = Decimal(exact) * ((Decimal(max_distance) / Decimal(exact)).ln() * k / n).exp()
        m = int(y.to_integral_value())
        if abs(y - m) > Decimal(10) ** -50:
            return int(y.to_integral_value(rounding="ROUND_CEILING"))
    # y is within 1e-50 of the integer m: is it m exactly?  With k / n in
    # lowest terms k' / n', m**n' = exact**(n' - k') * max_distance**k' can
    # only hold for n' <= 62 (max_distance / exact would be an n'-th power)
    g = math.gcd(k, n)
    k1, n1 = k // g, n // g
    if n1 <= 64 and m**n1 == exact ** (n1 - k1) * max_distance**k1:
        return m
    return m if y < m else m + 1


@lru_cache(maxsize=64)
def _thresholds(per_dir, exact, max_distance, count):
    """t_1 .. t_count as int64 (count <= per_dir - 1 - exact)."""
    n = per_dir - exact
    k = np.arange(1, count + 1, dtype=np.float64)
    ratio = math.log(max_distance) - math.log(exact)
    y = exact * np.exp(k * ratio / n)
    low = np.ceil(y * (1 - _FLOAT64_DOUBT))
    high = np.ceil(y * (1 + _FLOAT64_DOUBT))
    t = high.astype(np.int64)
    for i in np.flatnonzero(low != high):
        t[i] = _exact_threshold(int(i) + 1, n, exact, max_distance)
    t.setflags(write=False)
    return t


def thresholds(bidirectional, num_buckets, max_distance, largest):
    """The bucket thresholds a distance of at most `largest` can reach (a
    read-only int64 array: every t_k <= largest, perhaps a few more)."""
    per_dir, exact = layout(bidirectional, num_buckets)
    total = per_dir - 1 - exact
    if exact == 0 or total <= 0 or largest < exact:
        return np.empty(0, np.int64)
    n = per_dir - exact
    ratio = math.log(max_distance) - math.log(exact)
    # t_k > largest beyond k = n ln(largest / exact) / ratio: two to spare,
    # then a power of two, so that nearby calls share a cached array
    need = int(n * (math.log(largest) - math.log(exact)) / ratio) + 2
    count = min(total, 1 << max(need - 1, 0).bit_length())
    return _thresholds(per_dir, exact, max_distance, count)
