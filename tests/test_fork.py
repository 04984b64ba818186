"""posenc in processes forked after a parallel call, and the bound on threads.

OpenMP's threads do not survive fork(): without care, a child forked after
a parallel posenc call hangs on its first parallel call.  Each test runs a
script in a child Python (its own session, killed with all it forked after
TIMEOUT seconds, so that a hang fails the test instead of hanging the run).
The script makes a parallel call in the parent, forks in one of the ways
users do, repeats the call in the child and checks that the child's result
equals the parent's bit for bit; its exit code carries the verdict.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from optional import require

import posenc

TIMEOUT = 60

ROOT = os.path.dirname(os.path.dirname(posenc.__file__))


def _cpus():
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
needs_threads = pytest.mark.skipif(
    not posenc.config()["openmp"] or _cpus() < 2,
    reason="needs OpenMP and two CPUs for a parallel call",
)

# What the scripts share: compute() is a call large enough for two threads,
# same() compares results bit for bit.
COMMON = """
import os, sys, warnings
import numpy as np
import posenc

# Python 3.12+ warns that fork() in a process with threads may deadlock:
# that is what is tested here.
warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)

X = np.random.default_rng(0).standard_normal((1, 32, 2048, 128)).astype(np.float32)
Q, K = X[:, :2, :256, :64], X[:, 2:4, :256, :64]
R, U = X[0, 4:6, :512, :64], X[0, 6, :2, :64]


def compute():
    # the relative terms' products small enough for one call of each
    # kernel on its threads: the gathers by query and by key, the dense add;
    # DeBERTa's backward (the scatters by query and by key, BLAS)
    from posenc._grad import grads

    scores = posenc.xl_position_term(Q, R)
    args, options = (Q, K, R[:, :256], R[:, 256:]), dict(
        position_buckets=128, max_relative_positions=256
    )
    wanted = ["q", "k", "pos_key", "pos_query"]
    return (
        posenc.apply_rope(X),
        posenc.alibi_bias(16, 1024),
        posenc.xl_content_bias(K, U, scores=scores),
        posenc.deberta_attention_bias(*args, **options),
        *grads("deberta_attention_bias", scores, wanted, args, options).values(),
    )


def same(a, b):
    return all(
        u.shape == v.shape and u.dtype == v.dtype and u.tobytes() == v.tobytes()
        for u, v in zip(a, b)
    )


def in_child(check):
    # runs check() in a child forked with os.fork(), which exits 0 if it
    # returns true and 3 if it returns false or raises (its traceback
    # printed); the caller asserts that the child exited 0
    pid = os.fork()
    if pid == 0:
        try:
            ok = check()
        except BaseException:
            import traceback

            traceback.print_exc()
            ok = False
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
"""

# The parent's parallel call, before the script's body forks.
PARALLEL_PARENT = """
posenc.set_num_threads(2)
assert posenc.get_num_threads() == 2, posenc.get_num_threads()
PARENT = compute()
"""


def run_script(cwd, body, prelude=COMMON + PARALLEL_PARENT, **env):
    """Runs prelude + body in a child Python in the directory cwd; returns
    its CompletedProcess, or fails the test if it has not finished after
    TIMEOUT seconds (then it is killed with every process it forked)."""
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    if "OMP_NUM_THREADS" not in env:
        full_env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)  # the script's session: all it forked
        else:
            proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"hung for {TIMEOUT} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_ok(cwd, body, **kwargs):
    """run_script, which must exit 0 having printed ok."""
    res = run_script(cwd, body, **kwargs)
    assert res.returncode == 0, f"exit code {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "ok" in res.stdout.split(), res.stdout + res.stderr


def forking(test):
    """A test that forks while posenc's threads run: it needs both."""
    return needs_fork(needs_threads(test))


@forking
def test_os_fork_child_gets_the_parents_result(tmp_path):
    run_ok(
        tmp_path,
        """
        in_child(lambda: same(compute(), PARENT) and posenc.get_num_threads() == 1)
        assert same(compute(), PARENT)  # and the parent still has its threads
        print("ok")
        """,
    )


@forking
def test_multiprocessing_fork_process(tmp_path):
    run_ok(
        tmp_path,
        """
        import multiprocessing


        def child():
            sys.exit(0 if same(compute(), PARENT) else 3)


        p = multiprocessing.get_context("fork").Process(target=child)
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
        print("ok")
        """,
    )


@forking
def test_multiprocessing_fork_pool_map(tmp_path):
    run_ok(
        tmp_path,
        """
        import multiprocessing


        def task(i):
            return same(compute(), PARENT)


        with multiprocessing.get_context("fork").Pool(2) as pool:
            results = pool.map(task, range(4))
        assert results == [True] * 4, results
        print("ok")
        """,
    )


@forking
def test_torch_dataloader_fork_workers(tmp_path):
    require("torch")
    run_ok(
        tmp_path,
        """
        import torch
        from torch.utils.data import DataLoader, Dataset


        class Positional(Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return torch.tensor(same(compute(), PARENT))


        loader = DataLoader(
            Positional(), batch_size=None, num_workers=2, multiprocessing_context="fork"
        )
        results = [bool(r) for r in loader]
        assert results == [True] * 4, results
        print("ok")
        """,
    )


@forking
def test_set_num_threads_in_forked_child_brings_threads_back(tmp_path):
    # the child starts at one thread; set_num_threads(2) there gives it two
    # that work, and so does its own forked child once it asks again
    run_ok(
        tmp_path,
        """
        def grandchild():
            ok = posenc.get_num_threads() == 1 and same(compute(), PARENT)
            posenc.set_num_threads(2)
            return ok and posenc.get_num_threads() == 2 and same(compute(), PARENT)


        def child():
            assert same(compute(), PARENT)
            assert posenc.get_num_threads() == 1
            posenc.set_num_threads(0)
            assert posenc.get_num_threads() == 1
            posenc.set_num_threads(2)
            assert same(compute(), PARENT)
            assert posenc.get_num_threads() == 2
            assert same(compute(), PARENT)
            in_child(grandchild)
            return True


        in_child(child)
        print("ok")
        """,
    )


@forking
def test_child_forked_before_any_parallel_call_keeps_its_threads(tmp_path):
    # nothing to work around there: the child has its threads and its
    # setting, and its results are the parent's
    run_ok(
        tmp_path,
        """
        posenc.set_num_threads(2)
        in_child(lambda: posenc.get_num_threads() == 2 and same(compute(), compute()))
        print("ok")
        """,
        prelude=COMMON,
    )


# The bound: never more threads than CPUs this process may run on.
# clamped(n): after set_num_threads(n), 1 to cpus threads, and the result
# of one thread.
BOUND = """
cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
posenc.set_num_threads(1)
ONE = compute()


def clamped(n):
    posenc.set_num_threads(n)
    assert 1 <= posenc.get_num_threads() <= cpus, (posenc.get_num_threads(), cpus)
    assert same(compute(), ONE)
"""


def run_clamped(tmp_path, *ns, **env):
    """clamped(n) for each n in turn, in a child Python with `env`."""
    body = "".join(f"clamped({n})\n" for n in ns) + 'print("ok")\n'
    run_ok(tmp_path, body, prelude=COMMON + BOUND, **env)


def test_set_num_threads_above_the_cpu_count_is_clamped(tmp_path):
    run_clamped(tmp_path, 4096, 2**100)


def test_omp_num_threads_above_the_cpu_count_is_clamped(tmp_path):
    run_clamped(tmp_path, 0, OMP_NUM_THREADS="4096")  # 0: what OMP_NUM_THREADS asks for


def test_set_num_threads_rejects_negative_and_non_integer_n():
    with pytest.raises(ValueError, match="n"):
        posenc.set_num_threads(-1)
    with pytest.raises(ValueError, match="n"):
        posenc.set_num_threads(-(2**100))
    with pytest.raises(TypeError, match="n"):
        posenc.set_num_threads(2.0)
    with pytest.raises(TypeError, match="n"):
        posenc.set_num_threads(True)


# The libgomp posenc._core loaded, asked for its settings (omp_display_env
# prints them to stderr); the script's environment variables after import.
SPIN_REPORT = """
import ctypes
print("env", os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
with open("/proc/self/maps") as maps:
    gomp = sorted({line.split()[-1] for line in maps if "libgomp" in line})
print("libgomp", gomp)
sys.stdout.flush()
ctypes.CDLL(gomp[0]).omp_display_env(1)
"""

needs_libgomp = pytest.mark.skipif(
    not posenc.config()["openmp"] or not os.path.exists("/proc/self/maps"),
    reason="needs posenc built with GNU OpenMP, on Linux",
)


def _spin_script(tmp_path, **env):
    """SPIN_REPORT run in a child Python whose environment has neither
    GOMP_SPINCOUNT nor OMP_WAIT_POLICY but what `env` gives."""
    saved = {k: os.environ.pop(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in os.environ}
    try:
        res = run_script(tmp_path, SPIN_REPORT, prelude=COMMON, **env)
    finally:
        os.environ.update(saved)
    assert res.returncode == 0, res.stdout + res.stderr
    settings = dict(
        line.strip().split(" = ", 1) for line in res.stderr.splitlines() if " = " in line
    )
    return res.stdout.split("\n")[0], settings


@needs_libgomp
def test_kernels_threads_spin_briefly_unless_the_user_chose(tmp_path):
    # posenc asks libgomp for 1000 spins before its threads sleep, and takes
    # the variable out of the environment again (children do not inherit it)
    env, settings = _spin_script(tmp_path)
    assert env == "env None None", env
    assert settings["GOMP_SPINCOUNT"] == "'1000'", settings
    # a user's own choice, either variable, is left alone
    env, settings = _spin_script(tmp_path, GOMP_SPINCOUNT="5000")
    assert env == "env 5000 None", env
    assert settings["GOMP_SPINCOUNT"] == "'5000'", settings
    env, settings = _spin_script(tmp_path, OMP_WAIT_POLICY="active")
    assert env == "env None active", env
    assert settings["OMP_WAIT_POLICY"] == "'ACTIVE'", settings
    assert settings["GOMP_SPINCOUNT"] != "'1000'", settings
