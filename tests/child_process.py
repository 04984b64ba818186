"""Python in a child process that imports the posenc under test (a module
shared by the test files, not collected by pytest)."""

import os
import subprocess
import sys

import posenc


def run(*args, check=False, cwd=None, timeout=None, **env):
    """``python *args`` with `env` added to this environment, output captured.

    It runs in `cwd`, by default the folder holding the posenc under test,
    so that a source tree in the caller's directory (a clone whose posenc is
    installed, not built in place) is not imported instead."""
    full_env = {**os.environ, **env}
    root = os.path.dirname(os.path.dirname(posenc.__file__))
    full_env["PYTHONPATH"] = root + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=full_env,
        check=check,
        cwd=root if cwd is None else cwd,
        timeout=timeout,
    )


def assert_every_path_gives_the_same_bits(code):
    """Runs `code`, which prints the SIMD path in use and a digest of its
    results, under ``POSENC_SIMD=scalar``, ``auto`` and each other path the
    CPU has: the first must be the portable path, the second the CPU's best,
    each the path asked for, and every digest equal."""
    from posenc import _core

    path, scalar = run("-c", code, check=True, POSENC_SIMD="scalar").stdout.split()
    assert path == "scalar"
    best, auto = run("-c", code, check=True, POSENC_SIMD="auto").stdout.split()
    assert best == _core.simd_cpu() and auto == scalar
    for want in _core.simd_paths():
        if want not in ("scalar", best):
            path, digest = run("-c", code, check=True, POSENC_SIMD=want).stdout.split()
            assert path == want and digest == scalar
