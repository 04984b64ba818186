"""The C gathers of posenc.relative against the memory floor, timed in turn.

Each term makes its products a block of rows (or keys) at a time with BLAS
and gathers them while they are in cache (posenc/_relative_engine.py,
_gather_part; DeBERTa's two terms together in one pass, _gather_pair).
Here the gathers one call of each term makes are recorded
(benchmarks/bench_relative.py, _recorded_gathers) and replayed alone, by
query, by key and in one pass separately, each replay timed alternately
with the read-modify-write of the same (1, 16, 1024, 1024) float32 scores
(``uint64 += 0`` over their bytes); the medians of the per-pair ratios are
reported.  On a machine shared with other work the floor itself moves from
minute to minute, which the alternation cancels.

A term runs its gathers on one thread when BLAS calls come between them
(two teams of threads would contend for the cores); ``--all-threads``
replays them on the threads ``--threads`` gives instead, which is what the
kernels do when called without BLAS in between.

    python benchmarks/relative_floor.py                 # 21 pairs
    python benchmarks/relative_floor.py --threads 2 --repeats 41
    python benchmarks/relative_floor.py --threads 2 --all-threads
    python benchmarks/relative_floor.py --simd avx2,avx512  # the paths in turn

With ``--simd`` each pair takes every path named in turn (set_simd), then
the read-modify-write: a column of ratios per path, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import posenc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_relative import _recorded_gathers  # noqa: E402
from common import _rmw_of  # noqa: E402


def _terms(scores, n, heads, d):
    rng = np.random.default_rng(0)
    f4 = np.float32
    q = rng.standard_normal((1, heads, n, d)).astype(f4)
    k = rng.standard_normal((1, heads, n, d)).astype(f4)
    r = rng.standard_normal((heads, 2 * n, d)).astype(f4)
    span = 256
    pk = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    pq = rng.standard_normal((heads, 2 * span, d)).astype(f4)
    table = posenc.tener_relative_table(n, d)
    a_k = rng.standard_normal((33, d)).astype(f4)
    deberta = dict(position_buckets=span, max_relative_positions=512, scores=scores)
    return {
        "Transformer-XL position term": lambda: posenc.xl_position_term(q, r, scores=scores),
        "DeBERTa c2p (256 buckets)": lambda: posenc.deberta_attention_bias(q, k, pk, **deberta),
        "DeBERTa p2c": lambda: posenc.deberta_attention_bias(q, k, None, pq, **deberta),
        "DeBERTa c2p and p2c": lambda: posenc.deberta_attention_bias(q, k, pk, pq, **deberta),
        "TENER query and key terms": lambda: posenc.tener_position_term(q, k, table, scores=scores),
        "Shaw key term (clip 16)": lambda: posenc.shaw_key_term(
            q, a_k, max_distance=16, scores=scores
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument(
        "--all-threads", action="store_true", help="gathers on every thread, not as the terms run"
    )
    parser.add_argument(
        "--simd", default="", help="SIMD paths to alternate, comma separated (default: the current)"
    )
    args = parser.parse_args(argv)
    paths = [p for p in args.simd.split(",") if p] or [posenc._core.simd_path()]
    lacking = [p for p in paths if p not in posenc._core.simd_paths()]
    if lacking:
        parser.error(f"--simd {', '.join(lacking)}: not a path this CPU has")
    before = posenc._core.simd_path()
    n, heads, d = 1024, 16, 64
    posenc.set_num_threads(args.threads)
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((1, heads, n, n)).astype(np.float32)
    rmw = _rmw_of(scores)

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    how = "every gather on all of them" if args.all_threads else "gathers as the terms run them"
    print(
        f"posenc {posenc.__version__}, simd {posenc.config()['simd']}, "
        f"{args.threads} thread(s), {how}"
    )
    print()
    heads_ms = " | ".join(f"{p} ms" for p in paths)
    heads_x = " | ".join(f"{p} / rmw" for p in paths)
    last = f" | {paths[-1]} / {paths[0]}" if len(paths) > 1 else ""
    print(f"| C gathers | calls | {heads_ms} | read-modify-write ms | {heads_x}{last} |")
    print("|---|---:|" + "---:|" * (2 * len(paths) + 1 + (len(paths) > 1)))
    for name, term in _terms(scores, n, heads, d).items():
        replay, calls = _recorded_gathers(term)
        time.sleep(0.5)  # OpenBLAS's threads spin a while after the term's products
        # by query, by key, or both in one pass (a call with products by key too)
        for kind in sorted({(c[3], len(c) > 5) for c in calls}):
            part = [
                c[:4] + (c[4] and not args.all_threads,) + c[5:]
                for c in calls
                if (c[3], len(c) > 5) == kind
            ]

            def gather(part=part, replay=replay):
                replay(part)

            def on(path, f=gather):
                posenc._core.set_simd(path)
                try:
                    return timed(f)
                finally:
                    posenc._core.set_simd(before)

            for path in paths:
                on(path)
            rmw()

            def pair(r):  # the paths in turn, in the other order every other pair
                order = paths if r % 2 == 0 else paths[::-1]
                got = {p: on(p) for p in order}
                return [got[p] for p in paths] + [timed(rmw)]

            times = np.array([pair(r) for r in range(args.repeats)]).T
            tr = times[-1]
            label = f"{name}, " + ("one pass" if kind[1] else "by key" if kind[0] else "by query")
            ms = " | ".join(f"{np.median(t) * 1e3:.2f}" for t in times[:-1])
            xs = " | ".join(f"{np.median(t / tr):.2f}x" for t in times[:-1])
            if len(paths) > 1:
                xs += f" | {np.median(times[-2] / times[0]):.2f}"
            print(f"| {label} | {len(part)} | {ms} | {np.median(tr) * 1e3:.2f} | {xs} |")
        scores[...] = rng.standard_normal(scores.shape, dtype=np.float32)  # keep them finite


if __name__ == "__main__":
    main()
