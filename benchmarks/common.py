"""What every benchmark group shares: the `Case` record, the timer, the
memory floors, the driver that times the cases and the table it prints."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

import posenc

try:  # the comparison only; never a dependency of posenc
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

try:  # the comparison only; never a dependency of posenc
    import jax
    import jax.numpy as jnp
except ImportError:  # pragma: no cover - depends on the machine
    jax = jnp = None


@dataclass
class Case:
    """One benchmark: callables for each contender, built for a thread count."""

    name: str
    nbytes: int
    posenc: object
    memory: object = None  # None: no floor that means anything (the row shows "—")
    numpy: object = None
    torch: object = None
    compiled: object = None  # None: torch.compile of `torch`; False: no compiled column
    jit: object = None  # the jax.numpy formula under jax.jit
    note: str = ""
    extra: dict = field(default_factory=dict)
    # None: each column timed on its own (the median); else timer(repeats)
    # times the case itself (e.g. posenc and torch alternately) and gives the
    # row's posenc_ms, torch_ms and figures of its own
    timer: object = None


def have_transformers():
    """Whether the torch comparisons that call transformers' own code can run."""
    if torch is None:
        return False
    try:
        import transformers  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the machine
        return False
    return True


def timeit(fn, repeats, min_time=0.2):
    """Median seconds of `fn()`, after one warm-up call; at least `repeats`
    calls, more for fast functions so that the total is ~`min_time`."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(repeats, min(200, int(min_time / once)))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def copyto_of(shape, dtype):
    src = np.ones(shape, dtype)
    dst = np.empty(shape, dtype)
    return lambda: np.copyto(dst, src)


def copyto_like(x):
    """copyto_of the bytes of `x` (bfloat16 copied as float16, the same bytes)."""
    return copyto_of(x.shape, np.float16 if x.dtype.name == "bfloat16" else x.dtype)


def _rmw_of(arr, passes=1):
    """The read-modify-write of `arr`'s bytes in place (as uint64 += 0),
    `passes` times: one read and one write each, what as many adds into it
    cannot go below."""
    words = arr.reshape(-1).view(np.uint64)

    def rmw():
        for _ in range(passes):
            np.add(words, np.uint64(0), out=words)

    return rmw


def _gemm_floor(pairs, memory):
    """The floor of a whole relative term (or of its backward): the GEMMs
    ``left @ right^T`` its products need, one for each (left, right) of
    `pairs` (float32, (..., m, d) and (..., n, d), leading axes
    broadcasting), alone (NumPy's, OpenBLAS's threads, each into a buffer
    made beforehand, ``right^T`` laid out beforehand), then `memory`, the
    pass over the big array it cannot avoid (for a forward, the
    read-modify-write of the scores)."""
    gemms = []
    for left, right in pairs:
        lead = np.broadcast_shapes(left.shape[:-2], right.shape[:-2])
        out = np.empty(lead + (left.shape[-2], right.shape[-2]), np.float32)
        gemms.append((left, np.ascontiguousarray(np.swapaxes(right, -1, -2)), out))

    def floor():
        for left, right_t, out in gemms:
            np.matmul(left, right_t, out=out)
        memory()

    return floor


def _torch_of(x):
    """A NumPy array as a torch tensor sharing its memory; bfloat16 (ml_dtypes') by its bits."""
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _dtype_of(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _dtypes():
    try:
        import ml_dtypes  # noqa: F401

        return ("float32", "bfloat16")
    except ImportError:  # pragma: no cover - depends on the machine
        return ("float32",)


def _compile_column(case, torch_ok, compile_ok):
    """The callable timed in the compiled column: the case's own, else
    torch.compile of its torch callable (compiled on its first call)."""
    if not (torch_ok and compile_ok) or case.compiled is False:
        return None
    if case.compiled is not None:
        return case.compiled
    return torch.compile(case.torch) if case.torch is not None else None


def timeit_paths(fn, paths, repeats, min_time=0.2):
    """Median seconds of `fn()` on each SIMD path of `paths` (names as
    posenc._core.set_simd takes them), the paths' calls taken in turn, one
    call each a round, so that the machine's load falls on all of them
    alike; after one warm-up call each.  Returns {path: seconds}."""
    if len(paths) == 1:
        posenc._core.set_simd(paths[0])
        return {paths[0]: timeit(fn, repeats, min_time)}
    for path in paths:
        posenc._core.set_simd(path)
        fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(repeats, min(200, int(min_time / once)))
    times = {path: [] for path in paths}
    for _ in range(n):
        for path in paths:
            posenc._core.set_simd(path)
            t0 = time.perf_counter()
            fn()
            times[path].append(time.perf_counter() - t0)
    return {path: float(np.median(t)) for path, t in times.items()}


def run(
    cases, selected, threads, repeats, quick, torch_ok, compile_ok=True, jax_ok=True, paths=None
):
    """Time every case of the groups `cases` ((group, make) pairs) whose
    name contains one of `selected` (all if empty), at each thread count;
    posenc on each SIMD path of `paths` (None: the one in use), a row for
    each, the other contenders timed once and shown on every path's row."""
    in_use = posenc._core.simd_path()
    paths = list(paths) if paths else [in_use]
    rows = []
    for group, make in cases:
        if selected and not any(k in group for k in selected):
            continue
        for c in make(quick):
            compiled = _compile_column(c, torch_ok, compile_ok)
            for nt in threads:
                posenc.set_num_threads(nt)
                if torch_ok:
                    torch.set_num_threads(nt)
                row = {
                    "group": group,
                    "case": c.name,
                    "threads": nt,
                    "bytes": c.nbytes,
                    "note": c.note,
                    **c.extra,
                }
                if c.timer is not None:
                    row.update(memory_ms=None, numpy_ms=None, compiled_ms=None, jit_ms=None)
                    row["simd"] = in_use
                    row.update(c.timer(repeats))
                    rows.append(row)
                    print(format_row(row), file=sys.stderr, flush=True)
                    continue
                by_path = timeit_paths(c.posenc, paths, repeats)
                posenc._core.set_simd(in_use)
                row["simd"] = paths[0]
                row["posenc_ms"] = by_path[paths[0]] * 1e3
                row["memory_ms"] = timeit(c.memory, repeats) * 1e3 if c.memory else None
                row["numpy_ms"] = (
                    timeit(c.numpy, max(3, repeats // 4)) * 1e3
                    if c.numpy is not None and nt == threads[0]
                    else None
                )
                row["torch_ms"] = (
                    timeit(c.torch, repeats) * 1e3 if c.torch is not None and torch_ok else None
                )
                row["compiled_ms"] = timeit(compiled, repeats) * 1e3 if compiled else None
                row["jit_ms"] = timeit(c.jit, repeats) * 1e3 if c.jit and jax_ok else None
                for path in paths:
                    rows.append({**row, "simd": path, "posenc_ms": by_path[path] * 1e3})
                    print(format_row(rows[-1]), file=sys.stderr, flush=True)
    posenc.set_num_threads(0)
    # the NumPy reference runs on one thread whatever is set: one figure per case
    by_case = {}
    for row in rows:
        by_case.setdefault(row["case"], row["numpy_ms"])
        if row["numpy_ms"] is None:
            row["numpy_ms"] = by_case[row["case"]]
    for row in rows:
        row["vs_memory"] = row["posenc_ms"] / row["memory_ms"] if row["memory_ms"] else None
        row["numpy_speedup"] = row["numpy_ms"] / row["posenc_ms"] if row["numpy_ms"] else None
        row["torch_speedup"] = row["torch_ms"] / row["posenc_ms"] if row["torch_ms"] else None
        row["compiled_speedup"] = (
            row["compiled_ms"] / row["posenc_ms"] if row["compiled_ms"] else None
        )
        row["jit_speedup"] = row["jit_ms"] / row["posenc_ms"] if row["jit_ms"] else None
    return rows


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def format_row(row):
    return (
        f"{row['case']} [{row['threads']} thr, {row['simd']}]: posenc {row['posenc_ms']:.2f} ms, "
        f"memory {fmt(row['memory_ms'], '.2f')} ms"
    )


def markdown(rows):
    head = (
        "| case | thr | simd | MiB | posenc ms | memory ms | numpy ms | torch ms | compiled ms "
        "| jit ms | posenc/memory | numpy/posenc | torch/posenc | compiled/posenc | jit/posenc |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['threads']} | {r['simd']} | {r['bytes'] / 2**20:.0f} "
            f"| {r['posenc_ms']:.2f} "
            f"| {fmt(r['memory_ms'], '.2f')} | {fmt(r['numpy_ms'], '.1f')} "
            f"| {fmt(r['torch_ms'], '.2f')} "
            f"| {fmt(r['compiled_ms'], '.2f')} | {fmt(r['jit_ms'], '.2f')} "
            f"| {fmt(r['vs_memory'], '.2f')}x | {fmt(r['numpy_speedup'], '.1f')}x "
            f"| {fmt(r['torch_speedup'], '.2f')}x | {fmt(r['compiled_speedup'], '.2f')}x "
            f"| {fmt(r['jit_speedup'], '.2f')}x |"
        )
    return head + "\n".join(lines) + "\n"
