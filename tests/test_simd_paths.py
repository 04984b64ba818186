"""The SIMD paths this CPU has, against what the operating system says of it
(/proc/cpuinfo's flags on Linux), and how POSENC_SIMD and set_simd choose
among them: "avx512" where the CPU has AVX-512 F, DQ, BW and VL, "avx2" there
too, a path the CPU lacks falling back to the portable one.  The kernels
themselves are compared bit for bit across these paths by the tests that use
the `simd` and `on_every_path` fixtures (tests/conftest.py)."""

import platform

import child_process
import pytest

import posenc
from posenc import _core

X86 = platform.machine().lower() in ("x86_64", "amd64")
AVX512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl"}
AVX2 = {"avx2", "fma", "f16c"}


def _cpu_flags():
    """The flags of the first CPU in /proc/cpuinfo (Linux), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


FLAGS = _cpu_flags()
# a build with the x86 kernels compiled out (-DPE_FORCE_PORTABLE) has the
# portable path alone on any CPU
PORTABLE_BUILD = _core.simd_paths() == ("scalar",) and FLAGS is not None and AVX2 <= FLAGS
needs_flags = pytest.mark.skipif(
    FLAGS is None or not X86 or PORTABLE_BUILD,
    reason="not an x86-64 Linux machine, or a build without the x86 kernels",
)


@needs_flags
def test_paths_are_those_the_cpu_reports():
    # Linux lists a feature only where the kernel saves its registers (it
    # clears avx512f when XSAVE does not cover the ZMM state), so its flags
    # are the independent answer to what simd.c reads from cpuid and XCR0
    want = ["scalar"]
    if AVX2 <= FLAGS:
        want.append("avx2")
        if AVX512 <= FLAGS:
            want.append("avx512")
    assert list(_core.simd_paths()) == want
    assert _core.simd_cpu() == want[-1]
    assert _core.simd_bf16() == ("avx512" in want and "avx512_bf16" in FLAGS)


def test_avx512_path_is_tested_on_this_cpu():
    if "avx512" not in _core.simd_paths():
        pytest.skip(
            "this CPU has no AVX-512 (F, DQ, BW and VL, with the OS's ZMM state): "
            "the avx512 path's bit-for-bit tests are skipped here"
        )
    before = _core.simd_path()
    try:
        assert _core.set_simd("avx512") == "avx512" == posenc.simd_path()
        # every CPU with AVX-512 has the AVX2 path too
        assert _core.set_simd("avx2") == "avx2"
    finally:
        _core.set_simd(before)


def test_a_path_the_cpu_lacks_is_the_portable_one():
    before = _core.simd_path()
    try:
        for path in ("avx2", "avx512", "neon"):
            got = _core.set_simd(path)
            assert got == (path if path in _core.simd_paths() else "scalar")
            assert posenc.simd_path() == got
    finally:
        _core.set_simd(before)


def test_posenc_simd_avx512_is_a_choice_not_a_warning():
    code = "import posenc; print(posenc.simd_path())"
    res = child_process.run("-c", code, check=True, POSENC_SIMD="avx512", PYTHONWARNINGS="error")
    want = "avx512" if "avx512" in _core.simd_paths() else "scalar"
    assert res.stdout.strip() == want


def test_config_lists_the_paths():
    cfg = posenc.config()
    assert cfg["simd_paths"] == list(_core.simd_paths())
    assert cfg["simd_paths"][0] == "scalar" and cfg["simd_cpu"] == cfg["simd_paths"][-1]
    assert isinstance(cfg["simd_bf16"], bool)
    assert not cfg["simd_bf16"] or cfg["simd_cpu"] == "avx512"
