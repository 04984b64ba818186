"""Each C gather of posenc.relative against its memory floor, timed in turn.

The `relative` group of benchmarks/run.py times a gather and its floor
separately; on a machine shared with other work the floor itself moves from
minute to minute.  Here each of the gathers (one product array each: the
Transformer-XL shift, DeBERTa's c2p and p2c, TENER's query and key terms,
Shaw's clipped keys) is timed alternately with two floors on the same
(1, 16, 1024, 1024) float32 scores, and the medians of the per-pair ratios
are reported:

- ``scores += array`` of the scores' size (the scores read and written and
  as many bytes read again: what a gather reading products as large as the
  scores moves);
- the read-modify-write of the scores alone (``uint64 += 0`` over their
  bytes), the floor of a gather whose products are small.

    python benchmarks/relative_floor.py                 # 1 thread, 21 pairs
    python benchmarks/relative_floor.py --threads 2 --repeats 41
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import posenc
from posenc import _core


def _parts(n, heads, d):
    rng = np.random.default_rng(0)
    f4 = np.float32
    q = rng.standard_normal((1, heads, n, d)).astype(f4)
    k = rng.standard_normal((1, heads, n, d)).astype(f4)
    r = rng.standard_normal((heads, 2 * n, d)).astype(f4)
    t = np.arange(2 * n - 1, dtype=np.int64) - (n - 1)  # key - query
    span = 256
    pk = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    pq = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    buckets = np.clip(posenc.deberta_log_bucket(-t, span, 512) + span, 0, 2 * span - 1)
    table = posenc.tener_relative_table(n, d)
    a_k = rng.standard_normal((33, d)).astype(f4)
    return {
        "Transformer-XL position term": (q @ np.swapaxes(r, -1, -2), t + n, False),
        "DeBERTa c2p (256 buckets)": (q @ np.swapaxes(pk, -1, -2), buckets, False),
        "DeBERTa p2c, by key": (k @ np.swapaxes(pq, -1, -2), buckets, True),
        "TENER query term": (q @ table.T, n + t, False),
        "TENER key term, by key": (k @ table.T, n - t, True),
        "Shaw key term (clip 16)": (q @ a_k.T, np.clip(t, -16, 16) + 16, False),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    n, heads, d = 1024, 16, 64
    posenc.set_num_threads(args.threads)
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((1, heads, n, n)).astype(np.float32)
    pre = np.ones_like(scores)
    words = scores.reshape(-1).view(np.uint64)

    def add():
        np.add(scores, pre, out=scores)

    def rmw():
        np.add(words, np.uint64(0), out=words)

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    print(f"posenc {posenc.__version__}, simd {posenc.config()['simd']}, {args.threads} thread(s)")
    print()
    print(
        "| C gather | posenc ms | scores += array ms | read-modify-write ms | "
        "posenc / (+= array) | posenc / rmw |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (products, index, by_key) in _parts(n, heads, d).items():

        def gather(products=products, index=index, by_key=by_key):
            _core.rel_gather_add(products, index, scores, by_key)

        for f in (gather, add, rmw):
            f()
        tg, ta, tr = (
            np.array(x)
            for x in zip(*[(timed(gather), timed(add), timed(rmw)) for _ in range(args.repeats)])
        )
        print(
            f"| {name} | {np.median(tg) * 1e3:.2f} | {np.median(ta) * 1e3:.2f} | "
            f"{np.median(tr) * 1e3:.2f} | {np.median(tg / ta):.2f}x | {np.median(tg / tr):.2f}x |"
        )
        scores[...] = rng.standard_normal(scores.shape, dtype=np.float32)  # keep them finite


if __name__ == "__main__":
    main()
