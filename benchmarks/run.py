"""posenc's benchmark suite.

Every case times four things on the same machine in the same run:

- ``posenc``: the C kernel;
- ``numpy``: the pure-NumPy twin in ``posenc.reference``;
- ``torch``: the same computation in PyTorch on the CPU, written the way
  Hugging Face writes it (only when torch is importable);
- ``compiled``: that PyTorch code under ``torch.compile`` (Inductor, its
  default settings): what a user would otherwise compile;
- ``jit``: the same formulas written in ``jax.numpy`` under ``jax.jit`` (XLA
  on the CPU, its own threads), on JAX arrays: what a JAX user would
  otherwise compile (only when jax is importable);
- ``memory``: the machine's limit for the bytes involved, ``ndarray.fill`` of
  the output for a generator, ``np.copyto`` of the same bytes for a transform.

Each is timed as the median of several repeats after a warm-up.  The table
gives times in milliseconds and the ratios ``posenc / memory`` (1.0 is the
bandwidth floor), ``numpy / posenc``, ``torch / posenc`` and
``compiled / posenc``, ``jit / posenc`` (speed-ups).  The ``torch`` group calls
posenc with torch tensors: a decoding step (the round trip through posenc
included), posenc's operators under torch.compile, and autograd; the ``jax``
group with JAX arrays: eagerly, under jax.jit, and under jax.grad.  The
``lab`` group times a training step of posenc.lab's model against the same
model written with x-transformers, and against its own NoPE step (each
case's models alternately, their minima: ``bench_lab.py``); two tables of
its own follow the main one.

    python benchmarks/run.py                 # all cases, 1 and 2 threads
    python benchmarks/run.py --quick         # smaller, well under a minute
    python benchmarks/run.py -k rope --json out.json
    python benchmarks/run.py -k sinusoid --simd avx2,avx512   # a row per path
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys

import bench_lab
from common import jax, markdown, run, torch

import posenc

# the groups in the order they run: bench_<group>.<group>_cases(quick) -> list[Case]
GROUPS = (
    "sinusoid rope multimodal xpos deepseek bias functional newer bfloat16 t5_grad relative "
    "relative_grad torch jax probe context lab"
).split()
_MODULE = {"deepseek": "xpos"}  # DeepSeek-V3's layout is timed beside xPos
CASES = [
    (
        group,
        getattr(importlib.import_module(f"bench_{_MODULE.get(group, group)}"), f"{group}_cases"),
    )
    for group in GROUPS
]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("-k", action="append", default=[], help="only groups containing this")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument(
        "--simd",
        default="",
        help="comma-separated SIMD paths to time posenc on, a row each, their calls taken in "
        "turn (avx2,avx512; 'all': every path this CPU has but the portable one); default: the "
        "path in use (POSENC_SIMD)",
    )
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument(
        "--no-compile", action="store_true", help="leave the torch.compile column out"
    )
    parser.add_argument("--no-jax", action="store_true", help="leave the jax.jit column out")
    args = parser.parse_args(argv)
    unknown = [k for k in args.k if not any(k in group for group in GROUPS)]
    if unknown:
        parser.error(
            f"-k {', '.join(map(repr, unknown))} matches no group; the groups: {' '.join(GROUPS)}"
        )
    threads = [int(t) for t in args.threads.split(",")]
    if args.simd == "all":
        paths = [p for p in posenc._core.simd_paths() if p != "scalar"] or ["scalar"]
    else:
        paths = [p for p in args.simd.split(",") if p]
    lacking = [p for p in paths if p not in posenc._core.simd_paths()]
    if lacking:
        parser.error(
            f"--simd {', '.join(lacking)}: not a path this CPU has "
            f"({', '.join(posenc._core.simd_paths())})"
        )
    repeats = args.repeats or (5 if args.quick else 15)
    torch_ok = torch is not None and not args.no_torch
    jax_ok = jax is not None and not args.no_jax
    rows = run(
        CASES, args.k, threads, repeats, args.quick, torch_ok, not args.no_compile, jax_ok, paths
    )
    info = {
        **posenc.config(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__ if torch_ok else None,
        "jax": jax.__version__ if jax_ok else None,
        "quick": args.quick,
    }
    print(
        f"posenc {info['posenc']}, simd {info['simd']}, numpy {info['numpy']}, "
        f"torch {info['torch']}, jax {info['jax']}, {info['cpus']} cpus\n"
    )
    print(markdown(rows))
    lab = bench_lab.tables(rows)
    if lab:
        print(lab)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": info, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
