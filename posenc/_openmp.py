"""posenc._core loaded with a short spin for GNU OpenMP's waiting threads.

GNU OpenMP's threads spin for milliseconds after each parallel region (its
default GOMP_SPINCOUNT of 300000) before they sleep.  Where posenc has as
many threads as cores, they then hold the cores NumPy's BLAS threads need
next, which spin too: a BLAS product and ``apply_rope`` in turn took 1.63x
the product alone at two threads.  Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT
says otherwise, posenc's threads spin 1000 times (microseconds) and sleep:
1.04x.  libgomp reads the variable once, when it loads with posenc._core (a
libgomp another module loaded before is left as it is); the variable is
removed again at once, so that child processes do not inherit it.
"""

import os

SPIN = "GOMP_SPINCOUNT"
SET = "OMP_WAIT_POLICY" not in os.environ and SPIN not in os.environ

if SET:
    os.environ[SPIN] = "1000"
try:
    from . import _core  # noqa: F401
finally:
    if SET:
        del os.environ[SPIN]
