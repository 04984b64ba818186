"""A bounded fuzzer over the argument space of every public function.

    python tests/fuzz_api.py --seconds 60 [--seed 0]

Each round picks a function and calls it with arguments drawn from a pool of
awkward values (wrong types, NaN and infinities, huge and negative sizes,
empty, zero-d, strided, byte-swapped, read-only and object arrays, ...),
positionally and by keyword.  Every call must return or raise TypeError or
ValueError (MemoryError only for sizes that cannot be allocated) without a
NumPy RuntimeWarning; anything else, or a crash of the process, is a
failure.  CI runs it on the build with
AddressSanitizer and UndefinedBehaviorSanitizer, where a memory error aborts
the run.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings

import numpy as np

import posenc
from posenc import probe


def value_pool(rng):
    """Candidate values for any argument."""
    base = rng.standard_normal(24) * 100
    pool = [
        None,
        True,
        False,
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        16,
        64,
        -1,
        -2,
        2**62,
        -(2**63),
        2**70,
        0.0,
        -0.0,
        0.5,
        2.5,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        float("-inf"),
        np.int64(6),
        "query",
        "key",
        "interleaved_to_half",
        np.float32(2.0),
        np.float16(1.0),
        1 + 2j,
        "",
        "a",
        "float32",
        "half",
        "interleaved",
        "concat",
        "float16",
        "float64",
        "int8",
        b"x",
        [],
        [1, 2],
        [[1.0]],
        {},
        {"rope_type": "linear"},
        (2, 2),
        object(),
        slice(1),
        np.dtype("f4"),
        np.array(3.0),
        np.array([]),
        np.zeros((0, 4)),
        base,
        base.astype(np.float32),
        base.astype(np.float16),
        base.astype(">f8"),
        base.astype(np.int32),
        base.astype(np.uint8),
        base.astype(bool),
        base.astype(complex),
        base[::-3],
        base.reshape(4, 6),
        base.reshape(4, 6).T,
        base.reshape(2, 3, 4),
        base.reshape(2, 3, 4)[:, ::-1],
        np.broadcast_to(base[:6], (4, 6)),
        np.full((4, 6), np.nan),
        np.array(["x", "y"]),
        np.array([1, "a"], dtype=object),
        np.zeros((4, 6), np.float32),
        np.zeros((6, 4), np.float64),
        np.zeros((2, 4, 4)),
        np.zeros((1, 2, 4, 8), np.float32),
        np.zeros((1, 2, 4, 8), np.float16),
    ]
    ro = np.zeros((4, 6), np.float32)
    ro.flags.writeable = False
    pool.append(ro)
    return pool


# name -> (function, positional parameter names, keyword names)
TARGETS = {
    "sinusoid": (posenc.sinusoid, ["positions", "dim"], ["base", "layout", "dtype", "out"]),
    "rope_frequencies": (posenc.rope_frequencies, ["dim"], ["base", "scaling", "seq_len"]),
    "rope_cos_sin": (
        posenc.rope_cos_sin,
        ["positions", "dim"],
        ["base", "scaling", "layout", "dtype", "full", "xpos", "xpos_scale_base", "xpos_centre"],
    ),
    "apply_rope": (
        posenc.apply_rope,
        ["x", "positions"],
        [
            "base",
            "scaling",
            "layout",
            "rotary_dim",
            "offset",
            "seq_axis",
            "inverse",
            "out",
            "xpos",
            "xpos_scale_base",
            "xpos_centre",
        ],
    ),
    "alibi_slopes": (posenc.alibi_slopes, ["n_heads"], ["max_bias"]),
    "alibi_bias": (
        posenc.alibi_bias,
        ["n_heads", "q_len", "k_len"],
        ["slopes", "max_bias", "causal", "q_offset", "dtype", "scores", "out"],
    ),
    "relative_position_bucket": (
        posenc.relative_position_bucket,
        ["relative_position"],
        ["bidirectional", "num_buckets", "max_distance"],
    ),
    "t5_bias": (
        posenc.t5_bias,
        ["table", "q_len", "k_len"],
        ["bidirectional", "max_distance", "q_offset", "scores", "out"],
    ),
    "relative_positions": (
        posenc.relative_positions,
        ["q_len", "k_len"],
        ["max_distance", "q_offset"],
    ),
    "xl_relative_table": (
        posenc.xl_relative_table,
        ["q_len", "k_len", "dim"],
        ["attn_type", "bi_data", "clamp_len", "base", "dtype"],
    ),
    "xl_position_term": (
        posenc.xl_position_term,
        ["q", "r"],
        ["bias", "k_len", "q_offset", "causal", "scores"],
    ),
    "xl_content_bias": (posenc.xl_content_bias, ["k", "bias"], ["scores"]),
    "tener_relative_table": (posenc.tener_relative_table, ["length", "dim"], ["base", "dtype"]),
    "tener_position_term": (
        posenc.tener_position_term,
        ["q", "k", "table"],
        ["v", "key_term", "scores"],
    ),
    "tener_scores": (
        posenc.tener_scores,
        ["q", "k", "table"],
        ["u", "v", "scale", "key_term"],
    ),
    "deberta_log_bucket": (
        posenc.deberta_log_bucket,
        ["relative_pos", "bucket_size", "max_position"],
        ["precision"],
    ),
    "deberta_relative_positions": (
        posenc.deberta_relative_positions,
        ["q_len", "k_len"],
        ["bucket_size", "max_position", "q_offset", "precision"],
    ),
    "deberta_attention_bias": (
        posenc.deberta_attention_bias,
        ["q", "k", "pos_key", "pos_query"],
        [
            "position_buckets",
            "max_relative_positions",
            "q_offset",
            "scale_factor",
            "precision",
            "scores",
        ],
    ),
    "shaw_key_term": (
        posenc.shaw_key_term,
        ["q", "rel_keys"],
        ["max_distance", "k_len", "q_offset", "scores"],
    ),
    "shaw_value_term": (
        posenc.shaw_value_term,
        ["weights", "rel_values"],
        ["max_distance", "q_offset"],
    ),
    "tupe_bias": (
        posenc.tupe_bias,
        ["pos_q", "pos_k"],
        ["rel_table", "max_distance", "untie_cls", "scores"],
    ),
    "set_num_threads": (posenc.set_num_threads, ["n"], []),
    "cosine_similarity": (probe.cosine_similarity, ["E"], []),
    "informativeness": (probe.informativeness, ["E"], ["center"]),
    "skip_positions": (probe.skip_positions, ["n", "k"], []),
    "rope_long_term_decay": (probe.rope_long_term_decay, ["dim", "max_distance"], ["base"]),
}

# valid leading arguments, drawn half of the time to reach the deeper checks
VALID = {
    "sinusoid": lambda rng: [int(rng.integers(0, 9)), 2 * int(rng.integers(1, 9))],
    "apply_rope": lambda rng: [np.ones((1, 2, 3, 8), rng.choice(["f2", "f4", "f8"]))],
    "alibi_bias": lambda rng: [int(rng.integers(1, 5)), int(rng.integers(1, 6))],
    "t5_bias": lambda rng: [np.ones((8, 3), np.float32), int(rng.integers(1, 6))],
    "relative_positions": lambda rng: [int(rng.integers(1, 6))],
    "rope_cos_sin": lambda rng: [int(rng.integers(0, 6)), 2 * int(rng.integers(1, 6))],
    # the relative terms: (1, 2, 4, 8) queries and keys, tables that fit them
    "xl_relative_table": lambda rng: [int(rng.integers(0, 6)), int(rng.integers(0, 6)), 8],
    "xl_position_term": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((2, 8, 8))],
    "xl_content_bias": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((2, 8))],
    "tener_relative_table": lambda rng: [int(rng.integers(0, 6)), 2 * int(rng.integers(1, 5))],
    "tener_position_term": lambda rng: [np.ones((1, 2, 4, 8), np.float16)] * 2 + [np.ones((8, 8))],
    "tener_scores": lambda rng: [np.ones((1, 2, 4, 8))] * 2 + [np.ones((8, 8), np.float32)],
    "deberta_log_bucket": lambda rng: [np.arange(-9, 9), int(rng.integers(1, 8))],
    "deberta_relative_positions": lambda rng: [int(rng.integers(0, 6)), int(rng.integers(0, 6))],
    "deberta_attention_bias": lambda rng: (
        [np.ones((1, 2, 4, 8), np.float32)] * 2
        + [np.ones((2, 1024, 8), np.float32)]  # 2 x 512 rows
    ),
    "shaw_key_term": lambda rng: [np.ones((1, 2, 4, 8), np.float32), np.ones((9, 8))],
    "shaw_value_term": lambda rng: [np.ones((1, 2, 4, 4), np.float32), np.ones((9, 8))],
    "tupe_bias": lambda rng: [np.ones((2, 5, 8), np.float32)] * 2,
}


def fuzz(seconds, seed):
    # a NumPy RuntimeWarning (overflow, invalid) marks an edge not handled
    warnings.simplefilter("error", RuntimeWarning)
    rng = np.random.default_rng(seed)
    pool = value_pool(rng)
    # a call may write into a pool array (out=, scores=: alibi_bias leaves
    # -inf in it); each is set back after every call, so that the pool stays
    # what value_pool made and a failure reproduces from its printed call
    writable = [x for x in pool if isinstance(x, np.ndarray) and x.flags.writeable]
    pristine = [x.copy() for x in writable]
    names = sorted(TARGETS)
    deadline = time.monotonic() + seconds
    calls = 0
    counts = {}
    while time.monotonic() < deadline:
        name = names[rng.integers(len(names))]
        fn, positional, keywords = TARGETS[name]
        args = [pool[rng.integers(len(pool))] for _ in positional]
        if name in VALID and rng.random() < 0.5:
            valid = VALID[name](rng)
            args[: len(valid)] = valid
        kwargs = {k: pool[rng.integers(len(pool))] for k in keywords if rng.random() < 0.3}
        try:
            fn(*args, **kwargs)
            kind = "ok"
        except (TypeError, ValueError) as exc:
            kind = type(exc).__name__
        except MemoryError:
            kind = "MemoryError"
        except Exception:
            print(f"{name}(*{args!r}, **{kwargs!r}) raised:", file=sys.stderr)
            traceback.print_exc()
            return 1
        finally:
            posenc.set_num_threads(0)
            for x, saved in zip(writable, pristine):
                np.copyto(x, saved)
        calls += 1
        counts[(name, kind)] = counts.get((name, kind), 0) + 1
    for (name, kind), n in sorted(counts.items()):
        print(f"{name:24s} {kind:14s} {n}")
    print(f"{calls} calls in {seconds} s, no failure")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return fuzz(args.seconds, args.seed)


if __name__ == "__main__":
    sys.exit(main())
