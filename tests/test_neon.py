"""The NEON path (AArch64): "neon" as a choice of POSENC_SIMD and set_simd on
every machine, and the NEON kernels against the portable ones bit for bit,
cross-compiled and run under qemu-aarch64 (tests/c/run_neon.sh) where the
cross compiler and qemu are installed; under POSENC_REQUIRE_CROSS=1 (CI's
step that installs them) their absence is a failure, not a skip."""

import os
import shutil
import subprocess

import child_process
import pytest

from posenc import _core

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c", "run_neon.sh")


def test_set_simd_neon_is_the_neon_path_or_the_portable_one():
    before = _core.simd_path()
    try:
        got = _core.set_simd("neon")
        assert got == ("neon" if _core.simd_cpu() == "neon" else "scalar")
        assert _core.simd_path() == got
    finally:
        _core.set_simd(before)


def test_set_simd_names_every_choice():
    names = "simd must be 'auto', 'scalar', 'avx2', 'avx512' or 'neon'"
    with pytest.raises(ValueError, match=names):
        _core.set_simd("sve")


def test_posenc_simd_neon_is_a_choice_not_a_warning():
    code = "import posenc; print(posenc.simd_path())"
    res = child_process.run("-c", code, check=True, POSENC_SIMD="neon", PYTHONWARNINGS="error")
    assert res.stdout.strip() == ("neon" if _core.simd_cpu() == "neon" else "scalar")


def test_unknown_posenc_simd_warning_lists_neon():
    code = "import posenc"
    res = child_process.run("-c", code, check=True, POSENC_SIMD="sve", PYTHONWARNINGS="always")
    assert "'auto', 'scalar', 'avx2', 'avx512', 'neon'" in res.stderr


@pytest.mark.cross
def test_neon_kernels_give_the_portable_bits_under_qemu():
    tools = [os.environ.get("CC", "aarch64-linux-gnu-gcc"), os.environ.get("QEMU", "qemu-aarch64")]
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        if os.environ.get("POSENC_REQUIRE_CROSS") == "1":
            pytest.fail(f"{', '.join(missing)} missing (POSENC_REQUIRE_CROSS=1)")
        pytest.skip(f"{', '.join(missing)} not installed")
    # the cross compiler and qemu are not posenc's code: no sanitizer preloaded into them
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    res = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 differ") and not last.startswith("0 cases"), last
