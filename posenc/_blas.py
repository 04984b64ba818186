"""NumPy's OpenBLAS on one thread while posenc computes for torch.

posenc's NumPy functions make their products with NumPy's BLAS.  Called
from torch, between torch's own operations, two teams of threads then
share the cores: torch's, which spin for a while after each operation, and
OpenBLAS's, which spin after each product.  Each slows the other: a
training step of the lab's Transformer-XL model took 275 ms with OpenBLAS on
two threads, 104 ms on one (the step's torch operations on two threads in
both).  `one_thread()` sets OpenBLAS's threads to one for the duration of
a call and gives the count back after it (the last of concurrent callers
gives it back).

OpenBLAS is found among the libraries the process has loaded (Linux's
/proc/self/maps, the library already loaded by NumPy, never a new one),
through its own setter and getter; where there is none (another BLAS,
another system) the context does nothing: only the speed depends on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Any, Iterator, Optional, Tuple

# (setter, getter) names of OpenBLAS's thread count, as NumPy's wheels
# (scipy-openblas, 64-bit integers) and a system OpenBLAS export them
_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)

_lock = threading.Lock()
_found: Optional[Tuple[Tuple[Any, Any], ...]] = None
_depth = 0
_saved: Tuple[int, ...] = ()


def _loaded_openblas(maps="/proc/self/maps"):
    """The paths of the OpenBLAS libraries this process has loaded."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    paths = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6:
            path = fields[5].strip()
            name = os.path.basename(path).lower()
            if "openblas" in name and ".so" in name and path not in paths:
                paths.append(path)
    return paths


def _functions():
    """(setter, getter) of each loaded OpenBLAS, found once."""
    global _found
    if _found is None:
        found = []
        if sys.platform.startswith("linux"):
            for path in _loaded_openblas():
                try:
                    lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                except OSError:
                    continue
                for set_name, get_name in _NAMES:
                    setter = getattr(lib, set_name, None)
                    getter = getattr(lib, get_name, None)
                    if setter is not None and getter is not None:
                        setter.argtypes, setter.restype = [ctypes.c_int], None
                        getter.argtypes, getter.restype = [], ctypes.c_int
                        found.append((setter, getter))
                        break
        _found = tuple(found)
    return _found


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """OpenBLAS on one thread inside the block (see the module's doc)."""
    global _depth, _saved
    functions = _functions()
    if not functions:
        yield
        return
    with _lock:
        if _depth == 0:
            _saved = tuple(getter() for _, getter in functions)
            for (setter, _), n in zip(functions, _saved):
                if n > 1:
                    setter(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for (setter, _), n in zip(functions, _saved):
                    if n > 1:
                        setter(n)
