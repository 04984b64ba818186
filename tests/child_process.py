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
