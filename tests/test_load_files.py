"""Loading untrusted or odd files: ``probe.load_position_embeddings`` and
``python -m posenc probe --source``.

Each case is tried through the function (an exception naming the problem)
and through the command line in a child process (a one-line error on
stderr, exit status 1, no traceback).  No file may be waited on (a FIFO),
read where it is not needed (another member, another shard), or cost memory
out of proportion to what it holds.
"""

import contextlib
import json
import os
import socket
import stat
import struct
import sys
import threading
import time
import zipfile

import child_process
import numpy as np
import pytest

from posenc import probe

PREFIX = "posenc probe: error: "
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def table(n=64, d=8, seed=0):
    return np.cumsum(np.random.default_rng(seed).standard_normal((n, d)), axis=0)


def cli(*args):
    return child_process.run("-m", "posenc", "probe", "--seeds", "1", "--no-progress", *args)


def assert_reads_table_only(source, E, key, match, *also):
    """`source` (and each of `also`) gives the table E, and the command line
    runs on it; the member `key` beside it is never read for that, since
    reading it raises ValueError matching `match`."""
    for where in (source, *also):
        np.testing.assert_array_equal(probe.load_position_embeddings(where), E)
    with pytest.raises(ValueError, match=match):
        probe.load_position_embeddings(source, key=key)
    # one analysis of the table without scikit-learn: the load is what is tried here
    result = cli("--source", str(source), "--analyses", "toeplitz", "--no-baselines")
    assert result.returncode == 0, result.stderr


def assert_cli_error(source, *words, args=()):
    """``posenc probe --source SOURCE`` fails with one line holding `words`."""
    result = cli("--source", str(source), *args)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(PREFIX) and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return result.stderr


@contextlib.contextmanager
def watched_fifo(path):
    """Make a FIFO at `path`; yield a list that gets an entry if anything
    opens it to read.  Such a reader is then given a few bytes and an end of
    file, so that a failing test fails instead of hanging."""
    os.mkfifo(path)
    opened, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            try:  # succeeds only while a reader has the FIFO open
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)
                continue
            opened.append(path)
            with contextlib.suppress(OSError):
                os.write(fd, b"\x93NUMPY junk")
            os.close(fd)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        stop.set()
        thread.join()


def write_safetensors(path, header, data=b""):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def write_npy_member(archive, name, header, data=b"", *, repeat=0, compress=True):
    """A member `name` of the open ZipFile `archive`: an .npy header declaring
    `header` (descr, fortran_order, shape), then `data`, then `repeat` MiB of
    zeros written a MiB at a time."""
    kind = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    info = zipfile.ZipInfo(name)
    info.compress_type = kind
    with archive.open(info, "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)
        zeros = bytes(1 << 20)
        for _ in range(repeat):
            f.write(zeros)


def peak_rss_mib(*python_lines):
    """Peak resident memory (MiB) of a child Python running `python_lines`."""
    code = "\n".join(
        [
            "import resource, sys",
            *python_lines,
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss",
            "print(peak / (2**20 if sys.platform == 'darwin' else 2**10))",
        ]
    )
    result = child_process.run("-c", code)
    assert result.returncode == 0, result.stderr
    return float(result.stdout.split()[-1])


resource_only = pytest.mark.skipif(sys.platform == "win32", reason="needs the resource module")


# ---------------------------------------------------------------- not a regular file


@posix_only
@pytest.mark.parametrize("name", ["pe.npy", "pe.npz", "m.safetensors", "m.bin", "x.index.json"])
def test_a_fifo_is_refused_without_being_opened(tmp_path, name):
    path = tmp_path / name
    with watched_fifo(path) as opened:
        with pytest.raises(ValueError, match=r"is a FIFO \(named pipe\), not a regular file"):
            probe.load_position_embeddings(path)
        assert_cli_error(path, str(path), "FIFO")
    assert opened == []


@posix_only
@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_a_fifo_in_a_model_directory_is_refused_without_being_opened(tmp_path, name):
    with watched_fifo(tmp_path / name) as opened:
        with pytest.raises(ValueError, match=f"{name} is a FIFO.*not a regular file"):
            probe.load_position_embeddings(tmp_path)
        assert_cli_error(tmp_path, name, "not a regular file")
    assert opened == []


@posix_only
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_character_device_is_refused_directly_and_behind_a_link(tmp_path, device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    links = []
    for name in ("dev.npy", "dev.safetensors", "dev.npz"):
        (tmp_path / name).symlink_to(device)
        links.append(tmp_path / name)
    for path in (device, *links):
        with pytest.raises(ValueError, match="is a character device, not a regular file"):
            probe.load_position_embeddings(path)
    assert_cli_error(device, device, "character device")
    assert_cli_error(links[1], "dev.safetensors", "character device")


@posix_only
def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.npy"
    if len(str(path)) > 100:
        pytest.skip("path too long for a Unix socket")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        with pytest.raises(ValueError, match="is a socket, not a regular file"):
            probe.load_position_embeddings(path)
        assert_cli_error(path, "socket")


# ---------------------------------------------------------------- .npz


def write_npz_beside_table(path, E, name, header, **kwargs):
    """An .npz at `path`: the table E as wpe.weight, and beside it the member
    `name` written by write_npy_member(header, **kwargs)."""
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("wpe.weight.npy", "w") as f:
            np.lib.format.write_array(f, E)
        write_npy_member(archive, name, header, **kwargs)


def test_npz_reads_only_the_member_holding_the_table(tmp_path):
    E = table()
    path = tmp_path / "m.npz"
    # beside the table, a member that cannot be read (a pickle): reading it would fail
    write_npz_beside_table(
        path, E, "other.npy", {"descr": "|O", "fortran_order": False, "shape": (3,)}
    )
    assert_reads_table_only(path, E, "other", "Python objects")


@resource_only
def test_npz_with_a_huge_compressed_member_beside_the_table_costs_no_memory(tmp_path):
    E = table()
    path = tmp_path / "bomb.npz"
    header = {"descr": "|u1", "fortran_order": False, "shape": (512 << 20,)}
    write_npz_beside_table(path, E, "zeros.npy", header, repeat=512)  # 512 MiB of zeros
    assert path.stat().st_size < 4 << 20
    load = f"from posenc import probe; probe.load_position_embeddings({str(path)!r})"
    baseline = peak_rss_mib("from posenc import probe")
    assert peak_rss_mib(load) < baseline + 100


@resource_only
def test_npz_table_member_is_read_only_as_far_as_its_declared_shape(tmp_path):
    E = table()
    path = tmp_path / "tail.npz"
    with zipfile.ZipFile(path, "w") as archive:
        # the table, then 512 MiB of zeros past the array its header declares
        header = np.lib.format.header_data_from_array_1_0(E)
        write_npy_member(archive, "wpe.weight.npy", header, E.tobytes(), repeat=512)
    np.testing.assert_array_equal(probe.load_position_embeddings(path), E)
    load = f"from posenc import probe; probe.load_position_embeddings({str(path)!r})"
    assert peak_rss_mib(load) < peak_rss_mib("from posenc import probe") + 100


@pytest.mark.parametrize("compress", [True, False])
def test_npz_member_declaring_more_than_it_holds_is_refused_without_allocating(tmp_path, compress):
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as archive:
        header = {"descr": "<f8", "fortran_order": False, "shape": (1 << 40, 2)}  # 16 TiB
        write_npy_member(archive, "wpe.weight.npy", header, bytes(64), compress=compress)
    with pytest.raises(ValueError, match=r"the data ends after 64 of \d+ bytes"):
        probe.load_position_embeddings(path)
    # the command line refuses the shape before reading any data
    assert_cli_error(path, "1099511627776 rows", "more than 8192")


@resource_only
def test_cli_refuses_a_compressed_table_too_tall_to_probe_before_reading_it(tmp_path):
    path = tmp_path / "tall.npz"
    with zipfile.ZipFile(path, "w") as archive:
        header = {"descr": "|u1", "fortran_order": False, "shape": (64 << 20, 8)}  # 512 MiB
        write_npy_member(archive, "wpe.weight.npy", header, repeat=512)
    assert_cli_error(path, "67108864 rows", "more than 8192", "E[:8192]")
    code = (
        "from posenc.__main__ import main; "
        f"assert main(['probe', '--source', {str(path)!r}, '--no-progress']) == 1"
    )
    assert peak_rss_mib(code) < peak_rss_mib("from posenc.__main__ import main") + 100


def test_npy_declaring_more_data_than_the_file_holds_is_refused(tmp_path):
    path = tmp_path / "lie.npy"
    with open(path, "wb") as f:
        header = {"descr": "<f8", "fortran_order": False, "shape": (1 << 40, 2)}
        np.lib.format.write_array_header_1_0(f, header)
        f.write(bytes(64))
    with pytest.raises(ValueError, match=r"declares shape \(1099511627776, 2\).*holds 64"):
        probe.load_position_embeddings(path)
    assert_cli_error(path, "declares shape")


def test_npy_and_npz_in_fortran_order_and_big_endian_load_as_numpy_loads_them(tmp_path):
    E = table(20, 6)
    for variant in (np.asfortranarray(E), E.astype(">f4"), E.astype(np.float16)):
        np.save(tmp_path / "v.npy", variant)
        np.savez_compressed(tmp_path / "v.npz", wpe=variant)
        for name, key in (("v.npy", None), ("v.npz", "wpe")):
            loaded = probe.load_position_embeddings(tmp_path / name, key=key)
            np.testing.assert_array_equal(loaded, variant)
            assert loaded.dtype == variant.dtype


# ---------------------------------------------------------------- safetensors headers


def _entry(shape=(4, 2), offsets=(0, 32), dtype="F32"):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


DATA = np.arange(8, dtype="<f4").tobytes()  # 32 bytes

BAD_HEADERS = {
    "offsets past the data area": (
        {"wpe.weight": _entry(offsets=(0, 32))},
        DATA[:16],
        "end at 32, past the 16-byte data area",
    ),
    "span not the shape's size": (
        {"wpe.weight": _entry(offsets=(0, 16))},
        DATA,
        "spans 16 bytes, but shape [4, 2] of F32 needs 32",
    ),
    "negative dimension": (
        {"wpe.weight": _entry(shape=(-1, 2))},
        DATA,
        "not a list of non-negative integers",
    ),
    "float dimension": ({"wpe.weight": _entry(shape=(4.0, 2))}, DATA, "non-negative integers"),
    "bool dimension": ({"wpe.weight": _entry(shape=(True, 2))}, DATA, "non-negative integers"),
    "huge shape": ({"wpe.weight": _entry(shape=(10**30, 2))}, DATA, "needs 80000000"),
    "negative offset": ({"wpe.weight": _entry(offsets=(-8, 24))}, DATA, "data_offsets"),
    "offsets reversed": ({"wpe.weight": _entry(offsets=(32, 0))}, DATA, "0 <= begin <= end"),
    "three offsets": ({"wpe.weight": _entry(offsets=(0, 16, 32))}, DATA, "data_offsets"),
    "no shape": ({"wpe.weight": {"dtype": "F32", "data_offsets": [0, 32]}}, DATA, "shape"),
    "no dtype": ({"wpe.weight": {"shape": [4, 2], "data_offsets": [0, 32]}}, DATA, "dtype"),
    "dtype not a string": ({"wpe.weight": _entry(dtype=5)}, DATA, "no dtype string"),
    "entry not an object": ({"wpe.weight": [1, 2]}, DATA, "'wpe.weight' is not an object"),
    "header a list": ([], DATA, "a JSON list, not an object"),
    "metadata not an object": (
        {"__metadata__": [1], "wpe.weight": _entry()},
        DATA,
        "__metadata__ is not an object",
    ),
    "deep nesting": (b"[" * 100_000, b"", "nested more than 64 deep"),
    "deep nesting, closed": (b"[" * 5000 + b"]" * 5000, b"", "nested more than 64 deep"),
    "not UTF-8": (b'{"\xff": 1}', b"", "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_bad_safetensors_headers_are_refused_with_the_reason(tmp_path, case):
    header, data, words = BAD_HEADERS[case]
    path = write_safetensors(tmp_path / "m.safetensors", header, data)
    with pytest.raises(ValueError, match="is not a safetensors file") as info:
        probe.load_position_embeddings(path)
    assert words in str(info.value)
    assert_cli_error(path, "is not a safetensors file", words)


def test_safetensors_header_length_past_the_end_or_above_the_bound_is_refused(tmp_path):
    raw = json.dumps({"wpe.weight": _entry()}).encode()
    path = tmp_path / "long.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw) + 100) + raw)  # the JSON is whole, the file short
    with pytest.raises(ValueError, match="past the end of the"):
        probe.load_position_embeddings(path)
    assert_cli_error(path, "past the end of the")
    path.write_bytes(struct.pack("<Q", 100_000_001) + raw)
    with pytest.raises(ValueError, match="above the format's bound of 100000000"):
        probe.load_position_embeddings(path)
    path.write_bytes(struct.pack("<Q", 2**64 - 1) + raw)
    assert_cli_error(path, "above the format's bound")


def test_safetensors_header_checks_keep_valid_files_and_unread_dtypes(tmp_path):
    E = np.arange(8, dtype="<f4").reshape(4, 2)
    header = {
        "__metadata__": {"format": "pt"},
        "wpe.weight": _entry(),
        "mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [32, 35]},
        "packed": {"dtype": "F4", "shape": [4], "data_offsets": [35, 37]},  # size not checked
        "empty": {"dtype": "F32", "shape": [0, 5], "data_offsets": [37, 37]},
    }
    path = write_safetensors(tmp_path / "m.safetensors", header, DATA + b"\x01\x00\x01\x00\x00")
    np.testing.assert_array_equal(probe.load_position_embeddings(path), E)
    assert probe.load_position_embeddings(path, key="empty").shape == (0, 5)
    with pytest.raises(ValueError, match="dtype BOOL is not supported"):
        probe.load_position_embeddings(path, key="mask")


def test_key_names_that_are_not_printable_keep_the_message_one_line(tmp_path):
    names = ["a\nb", "c\rposition", "x\x00.wpe.weight", "y\u2028.wpe.weight"]
    header, at = {}, 0
    for name in names:
        header[name] = _entry(offsets=(at, at + 32))
        at += 32
    path = write_safetensors(tmp_path / "m.safetensors", header, DATA * len(names))
    with pytest.raises(ValueError) as info:  # two known names: which one?
        probe.load_position_embeddings(path)
    text = str(info.value)
    assert text.isprintable(), text
    assert "holds several position tables ('x\\x00.wpe.weight', 'y\\u2028.wpe.weight')" in text
    with pytest.raises(ValueError) as info:  # a key not there: the keys seen
        probe.load_position_embeddings(path, key="nope")
    text = str(info.value)
    assert text.isprintable() and "keys seen: 'c\\rposition', 'a\\nb'," in text, text
    assert_cli_error(path, "holds several position tables")


# ---------------------------------------------------------------- sharded checkpoints


def write_index(path, weight_map):
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path


def test_sharded_safetensors_are_read_through_the_index_one_shard(tmp_path):
    from safetensors.numpy import save_file

    E = table().astype(np.float32)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"not a safetensors file")
    save_file({"transformer.wpe.weight": E}, str(tmp_path / "model-00002-of-00002.safetensors"))
    write_index(
        tmp_path / "model.safetensors.index.json",
        {
            "transformer.h.0.mlp.weight": "model-00001-of-00002.safetensors",
            "transformer.wpe.weight": "model-00002-of-00002.safetensors",
        },
    )
    assert_reads_table_only(
        tmp_path,
        E,
        "transformer.h.0.mlp.weight",
        "00001-of-00002.safetensors is not a safetensors file",
        tmp_path / "model.safetensors.index.json",
    )


def test_sharded_torch_checkpoints_are_read_through_the_index_one_shard(tmp_path):
    torch = pytest.importorskip("torch")
    E = torch.randn(40, 8)
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"not a checkpoint")
    torch.save(
        {"transformer.wpe.weight": E, "transformer.ln_f.weight": torch.ones(8)},
        tmp_path / "pytorch_model-00002-of-00002.bin",
    )
    write_index(
        tmp_path / "pytorch_model.bin.index.json",
        {
            "transformer.wte.weight": "pytorch_model-00001-of-00002.bin",
            "transformer.wpe.weight": "pytorch_model-00002-of-00002.bin",
            "transformer.ln_f.weight": "pytorch_model-00002-of-00002.bin",
        },
    )
    assert_reads_table_only(
        tmp_path,
        E,
        "transformer.wte.weight",
        "cannot read .*00001-of-00002.bin with torch.load",
        tmp_path / "pytorch_model.bin.index.json",
    )


@posix_only
def test_a_shard_that_is_a_fifo_is_refused_and_other_shards_are_not_touched(tmp_path):
    from safetensors.numpy import save_file

    E = table().astype(np.float32)
    save_file({"wpe.weight": E}, str(tmp_path / "b.safetensors"))
    write_index(
        tmp_path / "model.safetensors.index.json",
        {"wpe.weight": "b.safetensors", "x": "a.safetensors"},
    )
    with watched_fifo(tmp_path / "a.safetensors") as opened:
        np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path), E)
        with pytest.raises(ValueError, match="a.safetensors is a FIFO"):
            probe.load_position_embeddings(tmp_path, key="x")
    assert opened == []


BAD_INDEXES = {
    "a shard outside the directory": (
        {"weight_map": {"wpe.weight": "../outside.safetensors"}},
        "which is not the name of a file beside the index",
    ),
    "an absolute shard path": (
        {"weight_map": {"wpe.weight": "/etc/passwd"}},
        "not the name of a file beside the index",
    ),
    "a shard that is not a string": ({"weight_map": {"wpe.weight": 3}}, "beside the index"),
    "no weight_map": ({"metadata": {}}, "no weight_map object"),
    "a list": ([1, 2], "no weight_map object"),
    "deep nesting": (b"{" + b'"a":[' * 50_000, "nested more than 64 deep"),
    "not JSON": (b"weight_map", "is not a checkpoint index"),
}


@pytest.mark.parametrize("case", sorted(BAD_INDEXES))
def test_bad_index_files_are_refused(tmp_path, case):
    content, words = BAD_INDEXES[case]
    (tmp_path / "outside.safetensors").write_bytes(b"")
    folder = tmp_path / "model"
    folder.mkdir()
    index = folder / "model.safetensors.index.json"
    index.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(ValueError, match="model.safetensors.index.json") as info:
        probe.load_position_embeddings(folder)
    assert words in str(info.value)
    assert_cli_error(folder, words)


def test_an_index_placing_a_key_in_a_shard_without_it_is_refused(tmp_path):
    from safetensors.numpy import save_file

    save_file({"other": np.ones((3, 3), np.float32)}, str(tmp_path / "a.safetensors"))
    write_index(tmp_path / "model.safetensors.index.json", {"wpe.weight": "a.safetensors"})
    with pytest.raises(ValueError, match=r"places 'wpe.weight' in .*a.safetensors, which lacks it"):
        probe.load_position_embeddings(tmp_path)
    assert_cli_error(tmp_path, "which lacks it")


def test_a_directory_with_two_indexes_asks_for_one(tmp_path):
    write_index(tmp_path / "model.safetensors.index.json", {})
    write_index(tmp_path / "model-fp16.safetensors.index.json", {})
    with pytest.raises(ValueError, match="several checkpoint indexes"):
        probe.load_position_embeddings(tmp_path)


def test_torch_shards_without_an_index_are_read_one_by_one(tmp_path):
    torch = pytest.importorskip("torch")
    E = torch.randn(30, 4)
    torch.save({"h.0.weight": torch.ones(4, 4)}, tmp_path / "a.bin")
    torch.save({"wpe.weight": E}, tmp_path / "b.bin")
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path), E)
    got = probe.load_position_embeddings(tmp_path, key="h.0.weight")
    np.testing.assert_array_equal(got, np.ones((4, 4)))


def test_a_torch_checkpoint_nested_too_deeply_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    nested = {"wpe.weight": torch.ones(10, 2)}
    for _ in range(100):
        nested = {"m": nested}
    torch.save(nested, tmp_path / "deep.pt")
    with pytest.raises(ValueError, match="nested more than 64 deep"):
        probe.load_position_embeddings(tmp_path / "deep.pt")
    assert_cli_error(tmp_path / "deep.pt", "nested more than 64 deep")
    cycle = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError, match="or hold themselves"):
        probe.load_position_embeddings(cycle)


# ---------------------------------------------------------------- tall tables


def test_a_table_taller_than_max_positions_is_refused_before_the_cosine_map():
    assert probe.MAX_POSITIONS == 8192
    tall = np.zeros((probe.MAX_POSITIONS + 1, 2))
    for fn in (probe.cosine_similarity, lambda E: probe.report(E, name="x", progress=False)):
        with pytest.raises(ValueError, match=r"8193 rows \(positions\), more than 8192") as info:
            fn(tall)
        assert "E[:8192]" in str(info.value) and "0.5 GiB" in str(info.value)
    # the bound is inclusive, and the probes that need no n x n matrix take any height
    assert probe._table(np.zeros((8192, 1)), max_rows=probe.MAX_POSITIONS).shape == (8192, 1)
    info = probe.informativeness(np.random.default_rng(0).standard_normal((20000, 2)))
    assert len(info.singular_values) == 2


@resource_only
def test_cli_refuses_a_tall_table_at_once_and_says_how_to_slice_it(tmp_path):
    path = tmp_path / "tall.npy"
    np.save(path, np.zeros((20000, 2)))  # 0.3 MB; its cosine map would be 3 GB
    assert_cli_error(path, "20000 rows", "more than 8192", "E[:8192]", "numpy.save")
    code = (
        "from posenc.__main__ import main; "
        f"assert main(['probe', '--source', {str(path)!r}, '--no-progress']) == 1"
    )
    assert peak_rss_mib(code) < peak_rss_mib("from posenc.__main__ import main") + 100


# ---------------------------------------------------------------- unaligned arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ">f8"])
def test_unaligned_arrays_are_copied_not_refused(dtype):
    E = table(40, 6).astype(dtype)
    buf = bytearray(E.nbytes + 1)
    unaligned = np.frombuffer(buf, dtype=E.dtype, offset=1).reshape(E.shape)
    unaligned[...] = E
    assert not unaligned.flags.aligned
    checked = probe._table(unaligned)
    assert checked.flags.aligned and checked.flags.c_contiguous
    assert not np.shares_memory(checked, unaligned)
    np.testing.assert_array_equal(probe.cosine_similarity(unaligned), probe.cosine_similarity(E))
    a = probe.absolute_position_regression(unaligned, seed=1)
    np.testing.assert_array_equal(
        a.predictions, probe.absolute_position_regression(E, seed=1).predictions
    )
    o = probe.relative_order_classification(unaligned, seed=1)
    np.testing.assert_array_equal(
        o.fold_errors, probe.relative_order_classification(E, seed=1).fold_errors
    )


def test_a_config_beside_a_table_that_is_not_json_is_named(tmp_path, capsys):
    from posenc.__main__ import main

    np.save(tmp_path / "table.npy", table())
    (tmp_path / "config.json").write_text("{not json")
    assert main(["probe", str(tmp_path / "table.npy")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json: not a readable JSON config" in err
