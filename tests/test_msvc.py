"""The C sources as MSVC compiles them on Windows (x86-64, the AVX2 kernels
dispatched at run time): tests/c/run_msvc.sh compiles every kernel file with
clang-cl for x86_64-pc-windows-msvc against mingw-w64's headers, with its
warnings and GCC's extensions made errors, no GCC-only spelling left after
preprocessing, and the OpenMP pragmas held to 2.0 (tests/c/openmp2.awk).
Compile only: nothing is linked or run.  Skipped where clang or the mingw-w64
headers are missing; under POSENC_REQUIRE_CROSS=1 (CI's step that installs
them) their absence is a failure."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join("tests", "c", "run_msvc.sh")
AWK = os.path.join("tests", "c", "openmp2.awk")
CLANG = os.environ.get("CLANG", "clang")
MINGW_INCLUDE = os.environ.get("MINGW_INCLUDE", "/usr/x86_64-w64-mingw32/include")

pytestmark = pytest.mark.cross


def _require_tools():
    missing = []
    if shutil.which(CLANG) is None:
        missing.append(CLANG)
    if not os.path.isfile(os.path.join(MINGW_INCLUDE, "_mingw.h")):
        missing.append(f"the mingw-w64 headers ({MINGW_INCLUDE})")
    if missing:
        if os.environ.get("POSENC_REQUIRE_CROSS") == "1":
            pytest.fail(f"{', '.join(missing)} missing (POSENC_REQUIRE_CROSS=1)")
        pytest.skip(f"{', '.join(missing)} not installed")


# clang and awk are not posenc's code: no sanitizer preloaded into them
ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def _run(root):
    return subprocess.run(
        ["bash", os.path.join(root, SCRIPT)],
        capture_output=True,
        text=True,
        timeout=900,
        env=ENV,
    )


def _copy_with(tmp_path, name, old, new):
    """The sources, the scripts and setup.py (the flags) copied into
    tmp_path, with `old` replaced by `new` (once) in src/name."""
    shutil.copytree(os.path.join(ROOT, "src"), tmp_path / "src")
    shutil.copytree(os.path.join(ROOT, "tests", "c"), tmp_path / "tests" / "c")
    shutil.copy(os.path.join(ROOT, "setup.py"), tmp_path / "setup.py")
    path = tmp_path / "src" / name
    text = path.read_bytes()  # bytes: the file's own line ends kept
    assert text.count(old.encode()) == 1
    path.write_bytes(text.replace(old.encode(), new.encode()))
    return str(tmp_path)


@pytest.mark.slow
def test_every_kernel_file_compiles_as_msvc_sees_it():
    _require_tools()
    res = _run(ROOT)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-6000:]
    last = res.stdout.strip().splitlines()[-1]
    sources = [f for f in os.listdir(os.path.join(ROOT, "src")) if f.endswith(".c")]
    n = sum(1 for f in sources if not f.startswith("module"))  # with /openmp and without
    assert last.startswith(f"run_msvc.sh: {2 * n} compiled by clang-cl"), last


def test_a_gcc_builtin_left_for_msvc_fails(tmp_path):
    # a builtin clang-cl takes but MSVC does not, outside simd.h's GCC branch
    _require_tools()
    old = "static void fire_prefetch("
    root = _copy_with(
        tmp_path,
        "fire.c",
        old,
        "static int gcc_only(int x)\n{\n    return __builtin_expect(x, 0);\n}\n\n" + old,
    )
    res = _run(root)
    assert res.returncode == 1
    assert "src/fire.c: GCC only, compiled by MSVC:" in res.stdout
    assert "__builtin_expect" in res.stdout


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "#pragma omp for schedule(dynamic, 1)",
            "#pragma omp for collapse(1) schedule(dynamic, 1)",
            "`collapse`: not in OpenMP 2.0",
        ),
        (
            "#pragma omp for schedule(dynamic, 1)",
            "#pragma omp for schedule(nonmonotonic: dynamic, 1)",
            "schedule(nonmonotonic): not in OpenMP 2.0",
        ),
        (
            "for (ptrdiff_t c = 0; c < nchunks; ++c) {",
            "for (size_t c = 0; c < (size_t)nchunks; ++c) {",
            "the loop of an OpenMP for: not OpenMP 2.0's form",
        ),
    ],
)
def test_openmp_beyond_2_0_fails(tmp_path, old, new, message):
    # the lint alone: it needs awk, not clang
    if shutil.which("awk") is None:
        pytest.skip("awk not installed")
    root = _copy_with(tmp_path, "bias.c", old, new)
    res = subprocess.run(
        ["awk", "-f", AWK, "src/bias.c"], cwd=root, capture_output=True, text=True, env=ENV
    )
    assert res.returncode == 1
    assert res.stdout.startswith("src/bias.c:") and message in res.stdout, res.stdout
    clean = subprocess.run(["awk", "-f", AWK, "src/bias.c"], cwd=ROOT, capture_output=True, env=ENV)
    assert clean.returncode == 0, clean.stdout
