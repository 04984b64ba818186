"""Threads, SIMD path and build information."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Dict, Optional, TextIO

import numpy as np

from . import _core
from ._validate import integer
from ._version import __version__

_SIMD_CHOICES = ("", "auto", "scalar", "avx2", "avx512", "neon")
if os.environ.get("POSENC_SIMD", "") not in _SIMD_CHOICES:
    warnings.warn(
        f"POSENC_SIMD={os.environ['POSENC_SIMD']!r} is not one of "
        "'auto', 'scalar', 'avx2', 'avx512', 'neon'; using 'auto'",
        RuntimeWarning,
        stacklevel=2,
    )


def set_num_threads(n: int) -> None:
    """Use at most `n` threads in posenc's kernels; ``0`` goes back to OpenMP's default.

    The default follows ``OMP_NUM_THREADS`` and threadpoolctl's limits, like
    NumPy's BLAS does.  Whatever `n` or that default asks, the kernels use
    at most as many threads as there are CPUs this process may run on (its
    CPU affinity, as ``os.sched_getaffinity`` reports it; all CPUs where
    there is none): a larger `n` is accepted and clamped to that number,
    and `get_num_threads` reports the clamped value.  Small problems run on
    one thread whatever is set.

    OpenMP's threads do not survive ``fork()``.  In a child process forked
    after posenc ran a kernel on several threads (``os.fork``,
    ``multiprocessing`` with the ``"fork"`` start method, torch
    ``DataLoader`` workers), posenc starts at one thread, and ``0`` means
    one thread there.  ``set_num_threads(n)`` in the child gives it `n`
    threads again; each call large enough for threads then starts them
    anew, which costs a fraction of a millisecond, so this pays off for
    large calls only.

    Between kernels the threads spin briefly and sleep (GNU OpenMP's
    ``GOMP_SPINCOUNT=1000``, set as posenc loads, unless ``OMP_WAIT_POLICY``
    or ``GOMP_SPINCOUNT`` is set), leaving the cores to NumPy's BLAS
    threads, which take turns with posenc's in a NumPy model.

    Raises ``TypeError`` if `n` is not an integer and ``ValueError`` if it
    is negative.

    Examples
    --------
    >>> import posenc
    >>> posenc.set_num_threads(1)
    >>> posenc.get_num_threads()
    1
    >>> posenc.set_num_threads(0)  # OpenMP's default again
    """
    _core.set_num_threads(integer(n, "n", minimum=0))


def get_num_threads() -> int:
    """The number of threads the next kernel call will use at most.

    That is the number `set_num_threads` asked for (or OpenMP's default),
    bounded by the number of CPUs this process may run on; ``1`` when posenc
    was built without OpenMP, and ``1`` in a child process forked after
    posenc ran a kernel on several threads, until `set_num_threads` is
    called there (see `set_num_threads`).

    Examples
    --------
    >>> import os, posenc
    >>> 1 <= posenc.get_num_threads() <= (os.cpu_count() or 1)
    True
    """
    return _core.get_num_threads()


def simd_path() -> str:
    """``'avx512'``, ``'avx2'``, ``'neon'`` or ``'scalar'``: the kernels in use.

    ``POSENC_SIMD`` chooses (``auto``, the default, takes the best the CPU
    has).  ``'avx512'`` on x86-64 CPUs with AVX-512 F, DQ, BW and VL whose
    operating system saves the ZMM registers (Intel since Skylake-SP, AMD
    since Zen 4; where the CPU also has AVX-512 BF16 the path uses its
    conversions, ``config()["simd_bf16"]``), ``'avx2'`` on those with AVX2,
    FMA and F16C, ``'neon'`` on AArch64 (Linux, Apple silicon),
    ``'scalar'`` (the portable kernels) elsewhere or when
    ``POSENC_SIMD=scalar``.  A path the CPU lacks is not used: asked for,
    it falls back to ``'scalar'``, which this function then reports.  The
    AVX-512 path has kernels of its own where they pay (the sinusoid, the
    cos/sin tables) and the AVX2 ones elsewhere.  Every path gives the same
    bits.

    Examples
    --------
    >>> import posenc
    >>> posenc.simd_path() in ("avx512", "avx2", "neon", "scalar")
    True
    """
    return _core.simd_path()


def config() -> Dict[str, Any]:
    """The build and run-time configuration, as a dict.

    Examples
    --------
    >>> import posenc
    >>> cfg = posenc.config()
    >>> sorted(cfg)[:4]
    ['numpy', 'openmp', 'platform', 'posenc']
    >>> cfg["simd"] == posenc.simd_path()
    True
    """
    return {
        "posenc": __version__,
        "simd": _core.simd_path(),
        "simd_cpu": _core.simd_cpu(),
        "simd_paths": list(_core.simd_paths()),
        "simd_bf16": bool(_core.simd_bf16()),
        "simd_requested": os.environ.get("POSENC_SIMD", "auto") or "auto",
        "openmp": bool(_core.openmp),
        "threads": _core.get_num_threads(),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": sys.platform,
    }


def show_config(file: Optional[TextIO] = None) -> None:
    """Print version, SIMD path in use, threads and NumPy version.

    Examples
    --------
    >>> import io, posenc
    >>> text = io.StringIO()
    >>> posenc.show_config(text)
    >>> text.getvalue().startswith("posenc ")
    True
    """
    cfg = config()
    lines = [
        f"posenc {cfg['posenc']}",
        f"  simd:    {cfg['simd']} (cpu supports {', '.join(cfg['simd_paths'])}"
        f"{', AVX-512 BF16' if cfg['simd_bf16'] else ''}; "
        f"POSENC_SIMD={cfg['simd_requested']})",
        f"  openmp:  {'yes' if cfg['openmp'] else 'no'}, {cfg['threads']} thread(s)",
        f"  numpy:   {cfg['numpy']}",
        f"  python:  {cfg['python']} on {cfg['platform']}",
    ]
    print("\n".join(lines), file=file if file is not None else sys.stdout)
