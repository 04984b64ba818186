"""The optional dependencies of the probes and of :mod:`posenc.context`:
imported when used.

scikit-learn, SciPy, matplotlib and threadpoolctl come with posenc's
``probe`` extra, torch, transformers and datasets with its ``context``
extra; :func:`require` imports one or says how to get it, and
:func:`one_thread` holds BLAS and OpenMP to one thread while the probes fit.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any, ContextManager


def require(module: str, purpose: str, extra: str = "probe") -> ModuleType:
    """Import `module` (part of posenc's extra `extra`) or say how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0].replace("sklearn", "scikit-learn")
        raise ImportError(
            f"{purpose} needs {package}, which comes with posenc's {extra!r} extra: "
            f'pip install "posenc[{extra}]"'
        ) from exc


def one_thread() -> ContextManager[Any]:
    """BLAS and OpenMP on one thread while the probes fit.

    The problems are small (a few hundred rows of ``2 * dim`` features):
    threaded BLAS on them spends its time waking and waiting for threads, up
    to a hundred times slower on a busy machine, and its reduction order
    changes with the thread count.  One thread is faster and gives the same
    figures on every machine.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    # SciPy's BLAS, a library apart from NumPy's that the fits call, loaded
    # first: one loaded after the limit is set keeps all its threads, and the
    # probes that the report runs at once restore them for each other mid-fit
    # (spinning BLAS threads made a first report twenty times as slow)
    with contextlib.suppress(ImportError):
        importlib.import_module("scipy.linalg")
    return threadpool_limits(limits=1)
