"""Fixtures shared by the tests: both SIMD paths, one and two threads."""

import os
import platform

import numpy as np
import pytest

import posenc
from posenc import _core

# the portable path, and the vector ones this CPU has ("avx2" and "avx512",
# or "neon"); on a CPU with AVX-512 BF16 the AVX-512 path twice, with the
# BF16 instructions and without (NO_BF16, as on a CPU without them)
NO_BF16 = "avx512 without bf16"
SIMD_PATHS = list(_core.simd_paths()) + ([NO_BF16] if _core.simd_bf16() else [])


def use_path(path):
    """Set the SIMD path (a name of SIMD_PATHS); returns the name set_simd
    gives it."""
    _core.set_simd_bf16(path != NO_BF16)
    return _core.set_simd("avx512" if path == NO_BF16 else path)


def restore_path(before):
    _core.set_simd_bf16(True)
    _core.set_simd(before)


# the paths a kernel test is parametrised over: those, and on x86-64 the
# AVX-512 path where this CPU (or the build) lacks it, skipped saying so
_X86 = platform.machine().lower() in ("x86_64", "amd64")
SIMD_PARAMS = SIMD_PATHS + [
    pytest.param(
        path,
        marks=pytest.mark.skip(
            reason=f"this CPU has no {name} (or the build has no x86 kernels): "
            f"the {path} path is not tested here"
        ),
    )
    for path, name in (
        ("avx2", "AVX2, FMA and F16C"),
        ("avx512", "AVX-512 F, DQ, BW and VL with the OS's ZMM state"),
    )
    if _X86 and path not in SIMD_PATHS
]


TESTS = os.path.dirname(os.path.abspath(__file__))
INTEROP_FILES = {
    "test_torch.py",
    "test_jax.py",
    "test_torch_modules.py",
    "test_torch_lab_modules.py",
    "test_fork.py",
    "test_lab.py",
    "test_lab_ddp.py",
}
KERNEL_FIXTURES = {"simd", "threads", "on_every_path"}
# the tests of what hands the kernels their arrays: dtypes, layouts,
# aliasing, bad input, the C seams, the properties against the reference
CONVERSION_FILES = {
    "test_bad_input.py",
    "test_bfloat16.py",
    "test_c_seams.py",
    "test_inputs.py",
    "test_promises.py",
    "test_properties.py",
}


def _slow_tests():
    with open(os.path.join(TESTS, "slow_tests.txt"), encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """The markers of pyproject.toml: `interop` (torch, JAX, transformers:
    tests/conformance and the torch and JAX files), `kernels` (run on each
    SIMD path or thread count), `conversions` (the files of CONVERSION_FILES),
    `slow` (listed in tests/slow_tests.txt)."""
    slow = _slow_tests()
    for item in items:
        path = os.path.relpath(str(item.path), os.path.dirname(TESTS)).replace(os.sep, "/")
        if path.startswith("tests/conformance/") or item.path.name in INTEROP_FILES:
            item.add_marker(pytest.mark.interop)
        if KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernels)
        if item.path.name in CONVERSION_FILES:
            item.add_marker(pytest.mark.conversions)
        if f"{path}::{getattr(item, 'originalname', item.name)}" in slow:
            item.add_marker(pytest.mark.slow)


def _log_skipped(report):
    """With POSENC_SKIPPED_LOG set (CI's newcomer run), the id of each test or
    module that skipped goes to that file: the tests CI then runs where the
    witnesses are installed."""
    path = os.environ.get("POSENC_SKIPPED_LOG")
    if path and report.skipped:
        with open(path, "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\n")


def pytest_runtest_logreport(report):
    if report.when == "setup" or report.when == "call":
        _log_skipped(report)


def pytest_collectreport(report):
    _log_skipped(report)


def pytest_report_header(config):
    cfg = posenc.config()
    return [
        f"posenc {cfg['posenc']} from {os.path.dirname(posenc.__file__)}",
        f"simd {cfg['simd']} (cpu {cfg['simd_cpu']}), openmp {cfg['openmp']}, "
        f"threads {cfg['threads']}, numpy {cfg['numpy']}",
    ]


@pytest.fixture(params=SIMD_PARAMS)
def simd(request):
    """Run the test on each SIMD path this CPU has (the portable one always)."""
    before = _core.simd_path()
    assert use_path(request.param) == request.param.split()[0]
    yield request.param
    restore_path(before)


def _on_every_path(make):
    """make() on each SIMD path this CPU has (SIMD_PATHS), with 1 and 2
    threads (tests/test_simd_paths.py says which paths those are, and skips
    saying so where the CPU lacks AVX-512)."""
    results = []
    before = _core.simd_path()
    for path in SIMD_PATHS:
        for n in (1, 2):
            assert use_path(path) == path.split()[0]
            posenc.set_num_threads(n)
            try:
                results.append(make())
            finally:
                restore_path(before)
                posenc.set_num_threads(0)
    return results


@pytest.fixture(scope="session")
def on_every_path():
    """on_every_path(make): make() on each SIMD path with 1 and 2 threads."""
    return _on_every_path


@pytest.fixture(params=[1, 2])
def threads(request):
    """Run the test with one and with two OpenMP threads."""
    posenc.set_num_threads(request.param)
    yield request.param
    posenc.set_num_threads(0)


@pytest.fixture
def rng():
    return np.random.default_rng(20201116)


def _ulp_distance(actual, exact, dtype):
    """|actual - exact| in units of the last place of `dtype` at `exact`."""
    exact = np.asarray(exact, dtype=np.float64)
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
    return np.abs(np.asarray(actual, dtype=np.float64) - exact) / spacing


@pytest.fixture
def ulp_distance():
    """ulp_distance(actual, exact, dtype): elementwise error in ulps of dtype."""
    return _ulp_distance
