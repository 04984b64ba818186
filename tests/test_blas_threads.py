"""posenc._blas: NumPy's OpenBLAS on one thread while posenc computes for
torch.  The witness is OpenBLAS's own getter, and a maps file written here."""

import numpy as np
import pytest

from posenc import _blas


def test_the_loaded_openblas_is_read_from_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0-7f1 r-xp 00000000 08:01 12 /usr/lib/libopenblasp-r0.3.so\n"
        "7f1-7f2 r--p 00000000 08:01 12 /usr/lib/libopenblasp-r0.3.so\n"
        "7f2-7f3 r-xp 00000000 08:01 13 /opt/numpy.libs/libscipy_openblas64_-ab.so\n"
        "7f3-7f4 r-xp 00000000 08:01 14 /usr/lib/libm.so.6\n"
        "7f4-7f5 rw-p 00000000 00:00 0 \n"
        "7f5-7f6 r-xp 00000000 08:01 15 /home/openblas-notes/libfoo.so\n"
    )
    assert _blas._loaded_openblas(str(maps)) == [
        "/usr/lib/libopenblasp-r0.3.so",
        "/opt/numpy.libs/libscipy_openblas64_-ab.so",
    ]
    assert _blas._loaded_openblas(str(tmp_path / "missing")) == []


def _numpy_openblas():
    np.ones((4, 4)) @ np.ones((4, 4))  # loaded with NumPy: present in the maps
    functions = _blas._functions()
    if not functions:
        pytest.skip("NumPy here has no OpenBLAS (another BLAS): one_thread does nothing")
    return functions[0]


@pytest.fixture
def two_threads():
    """OpenBLAS's (setter, getter), two threads set for the test (whatever
    OPENBLAS_NUM_THREADS says), its own count given back after."""
    setter, threads = _numpy_openblas()
    own = threads()
    setter(2)
    yield setter, threads
    setter(own)


def test_one_thread_inside_and_the_count_given_back(two_threads):
    _, threads = two_threads
    before = threads()
    assert before == 2
    with _blas.one_thread():
        assert threads() == 1
        with _blas.one_thread():  # nested: still one, and given back once
            assert threads() == 1
        assert threads() == 1
    assert threads() == before
    with pytest.raises(RuntimeError), _blas.one_thread():
        raise RuntimeError("an error inside")
    assert threads() == before
