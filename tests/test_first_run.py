"""A newcomer's first run: the installed `posenc` command, and what an import
of the unbuilt source tree says (a notebook opened in the root of a clone)."""

import os
import shutil
import subprocess
import sys

import posenc


def _unbuilt_source_tree(tmp_path):
    """A copy of the package as a clone has it: Python files, no extension."""
    package = os.path.dirname(posenc.__file__)
    shutil.copytree(
        package,
        tmp_path / "posenc",
        ignore=shutil.ignore_patterns("_core*", "__pycache__", "*.so", "*.pyd"),
    )
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "module.c").write_text("")
    return tmp_path


def _python(cwd, code):
    """`python -S -c code` in `cwd`: no site-packages (no installed or editable
    posenc), so the posenc imported is the one in `cwd`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_the_unbuilt_source_tree_says_what_to_do(tmp_path):
    tree = _unbuilt_source_tree(tmp_path)
    res = _python(tree, "import posenc")
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: posenc is being imported from its source tree")
    assert "pip install ." in last and "posenc probe" in last
    assert "partially initialized" not in last


def test_a_missing_extension_outside_a_source_tree_is_named(tmp_path):
    tree = _unbuilt_source_tree(tmp_path)
    os.remove(tree / "setup.py")
    res = _python(tree, "import posenc")
    assert "posenc._core cannot be imported" in res.stderr.strip().splitlines()[-1]


def test_the_posenc_command_runs_from_any_directory(tmp_path):
    # the console script beside this interpreter, run where a clone's
    # unbuilt source tree would shadow `python -m posenc`
    script = os.path.join(os.path.dirname(sys.executable), "posenc")
    if not os.path.exists(script):
        script = shutil.which("posenc")
    assert script, "the posenc command is not installed beside this Python"
    tree = _unbuilt_source_tree(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(posenc.__file__))
    res = subprocess.run(
        [script, "info"], cwd=tree, env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"posenc {posenc.__version__}")
