"""posenc.probe's ALiBi windows and T5 bucket biases against transformers'
own ALiBi functions and T5 attention modules, and against direct loops over
the definitions (posenc.probe.biases' docstring); by Hub name through the
loopback Hub and the command line."""

import json
import math

import numpy as np
import pytest
import tiny_models
from conftest import require
from hub_server import HubServer, Repo, folder_files, use_local_hub

from posenc import probe
from posenc.__main__ import main

# ---------------------------------------------------------------- ALiBi


def _direct_windows(slopes, threshold, spread):
    out = []
    for m in slopes:
        d = 0
        while m * d < threshold * spread:
            d += 1
        out.append(d)
    return out


@pytest.mark.parametrize("heads", [1, 4, 6, 12, 16])
def test_alibi_slopes_are_blooms_and_falcons_and_windows_the_direct_loop(torch, heads):
    from transformers import BloomConfig, FalconConfig
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor as falcon_alibi

    mask = torch.ones(1, 3)
    # the bias of the key at position 1 is slope * 1 (transformers adds it per key)
    bloom = build_alibi_tensor(mask, heads, torch.float64)[:, 0, 1].numpy()
    falcon = falcon_alibi(mask, heads, torch.float64)[:, 0, 1].numpy()
    r = probe.alibi_windows(BloomConfig(n_head=heads, hidden_size=8 * heads))
    np.testing.assert_allclose(r.slopes, bloom, rtol=1e-6)  # transformers' float32 slopes
    f = probe.alibi_windows(
        FalconConfig(alibi=True, num_attention_heads=heads, hidden_size=8 * heads)
    )
    np.testing.assert_allclose(f.slopes, falcon, rtol=2**-8)  # Falcon rounds to bfloat16
    assert r.windows.tolist() == _direct_windows(r.slopes, 3.0, 1.0)
    w = probe.alibi_windows(BloomConfig(n_head=heads), threshold=2.5, logit_spread=0.7)
    assert w.windows.tolist() == _direct_windows(w.slopes, 2.5, 0.7)


@pytest.mark.parametrize("heads, bias_max", [(8, 8), (12, 8), (12, 4), (6, 16)])
def test_alibi_slopes_are_mpts_with_its_alibi_bias_max(torch, heads, bias_max):
    from transformers import MptConfig
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    # MPT's bias of the key one before the last of 2: -slope
    mpt = -build_mpt_alibi_tensor(heads, 2, alibi_bias_max=bias_max)[:, 0, 0].double().numpy()
    config = MptConfig(n_heads=heads, d_model=8 * heads, attn_config={"alibi_bias_max": bias_max})
    r = probe.alibi_windows(config)
    np.testing.assert_allclose(r.slopes, mpt, rtol=1e-6)
    assert r.max_bias == bias_max


def test_alibi_result_outputs(tmp_path):
    r = probe.alibi_windows({"model_type": "bloom", "n_head": 4})
    d = r.to_dict()
    assert d["windows"] == [12, 48, 192, 768] and json.loads(json.dumps(d)) == d
    assert "| 3 | 0.003906 | 768 |" in r.to_markdown()
    assert r.plot(tmp_path / "a.png") == tmp_path / "a.png" and (tmp_path / "a.png").stat().st_size


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "llama"}, "this one (llama) is a rope model: try --analyses rope_usage"),
        ({"model_type": "t5"}, "(t5) is a t5 model: try --analyses t5_biases"),
        ({"model_type": "falcon"}, "(falcon) is a rope model"),  # alibi false by default
        ({"model_type": "gpt2"}, "(gpt2) is an absolute model: try --analyses paper"),
        ({"model_type": "bloom"}, "no number of heads"),
        ({"model_type": "mpt", "n_heads": 4, "attn_config": {"alibi": False}}, "alibi false"),
    ],
)
def test_alibi_refuses_what_it_cannot_read(config, message):
    with pytest.raises(ValueError, match="alibi|heads") as info:
        probe.alibi_windows(config)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "kwargs, error", [({"threshold": 0}, ValueError), ({"logit_spread": "1"}, TypeError)]
)
def test_alibi_bad_arguments(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        probe.alibi_windows({"model_type": "bloom", "n_head": 4}, **kwargs)


# ---------------------------------------------------------------- T5


def _t5(name, torch, **overrides):
    config_cls, model_cls = {
        "t5": ("T5Config", "T5Model"),
        "mt5": ("MT5Config", "MT5Model"),
        "umt5": ("UMT5Config", "UMT5Model"),
        "longt5": ("LongT5Config", "LongT5Model"),
    }[name]
    kwargs = dict(d_kv=4, num_layers=2, num_heads=3)
    model = tiny_models.t5(model_cls, config=config_cls, **kwargs, **overrides)
    with torch.no_grad():  # a bias that varies enough to make heads of every type
        for m in model.modules():
            if hasattr(m, "relative_attention_bias"):
                m.relative_attention_bias.weight.normal_(0, 3)
    return model.eval()


def _hf_bias(module, reach):
    """transformers' own bias of the query at `reach` for keys 0 .. 2 reach."""
    import torch

    with torch.no_grad():
        return _hf_bias_no_grad(module, reach)


def _hf_bias_no_grad(module, reach):
    n = 2 * reach + 1
    if type(module).__name__ not in ("LongT5LocalAttention", "LongT5TransientGlobalAttention"):
        return module.compute_bias(n, n)[0, :, reach, :].double().numpy()
    # LongT5's local attention computes its bias in blocks: use its bucket + table
    rel = torch_arange(n) - reach
    bucket = module._relative_position_bucket(
        rel,
        bidirectional=True,
        num_buckets=module.relative_attention_num_buckets,
        max_distance=module.relative_attention_max_distance,
    )
    return module.relative_attention_bias(bucket).T.double().numpy()


def torch_arange(n):
    import torch

    return torch.arange(n)


def _direct_figures(bias, distances, radius, far_from, both):
    """Loops over the definitions for one head's bias row."""
    seen = [(d, b) for d, b in zip(distances, bias) if both or d <= 0]
    top = max(b for _, b in seen)
    weights = [(d, math.exp(b - top)) for d, b in seen]
    z = sum(w for _, w in weights)
    local = sum(w for d, w in weights if abs(d) <= radius) / z
    mean_d = sum(abs(d) * w for d, w in weights) / z
    back = sum(w for d, w in weights if d < 0) / z
    fwd = sum(w for d, w in weights if d > 0) / z
    far = [b for d, b in seen if abs(d) >= far_from]
    decay = dict(seen)[0] - sum(far) / len(far)
    if local >= 0.5:
        kind = "local"
    elif both and back - fwd >= 0.2:
        kind = "backward"
    elif both and fwd - back >= 0.2:
        kind = "forward"
    else:
        kind = "global"
    return local, mean_d, back, fwd, decay, kind


@pytest.mark.parametrize(
    "family, overrides, layers",
    [
        ("t5", {}, ["encoder.0", "decoder.0"]),
        ("mt5", {"relative_attention_num_buckets": 16, "relative_attention_max_distance": 40},
         ["encoder.0", "decoder.0"]),
        ("umt5", {}, ["encoder.0", "encoder.1", "decoder.0", "decoder.1"]),
        ("longt5", {"encoder_attention_type": "local"}, ["encoder.0", "decoder.0"]),
    ],
)  # fmt: skip
def test_t5_biases_are_the_modules_own_and_figures_the_direct_loops(
    torch, family, overrides, layers
):
    model = _t5(family, torch, **overrides)
    r = probe.t5_bucket_biases(model, radius=4, reach=60)
    assert r.layers == layers
    attentions = {}
    for name, m in model.named_modules():
        if getattr(m, "has_relative_attention_bias", False) and "EncDecAttention" not in name:
            stack, block = name.split(".")[0], name.split(".")[2]
            attentions[f"{stack}.{block}"] = m
    assert sorted(attentions) == sorted(layers)
    config = model.config
    far_from = min(config.relative_attention_max_distance, 60)
    for li, layer in enumerate(r.layers):
        expected = _hf_bias(attentions[layer], 60)
        both = layer.startswith("encoder")
        got = r.bias[li]
        if both:
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_array_equal(got[:, :61], expected[:, :61])
            assert np.isnan(got[:, 61:]).all()
        for h in range(config.num_heads):
            local, mean_d, back, fwd, decay, kind = _direct_figures(
                expected[h], r.distances, 4, far_from, both
            )
            assert r.local_mass[li, h] == pytest.approx(local, abs=1e-12)
            assert r.mean_distance[li, h] == pytest.approx(mean_d, abs=1e-9)
            assert r.backward_mass[li, h] == pytest.approx(back, abs=1e-12)
            assert r.forward_mass[li, h] == pytest.approx(fwd, abs=1e-12)
            assert r.decay[li, h] == pytest.approx(decay, abs=1e-12)
            assert r.head_type[li, h] == kind


def test_t5_buckets_shuffled_is_the_modules_own_bias_of_permuted_tables(torch):
    import copy

    model = _t5("t5", torch)
    r = probe.t5_bucket_biases(model, radius=4, reach=60)
    for seed in (0, 1):
        rng = np.random.default_rng([seed, 1])  # one generator, the tables in the result's order
        shuffled = copy.deepcopy(model)
        stacks = {"encoder": shuffled.encoder, "decoder": shuffled.decoder}
        with torch.no_grad():
            for layer in r.layers:
                stack, block = layer.split(".")
                attention = stacks[stack].block[int(block)].layer[0].SelfAttention
                table = attention.relative_attention_bias.weight.double().numpy()
                permuted = rng.permuted(table, axis=0)
                attention.relative_attention_bias.weight.copy_(torch.from_numpy(permuted))
        local, decay = [], []
        for layer in r.layers:
            stack, block = layer.split(".")
            attention = stacks[stack].block[int(block)].layer[0].SelfAttention
            expected = _hf_bias(attention, 60)
            for h in range(expected.shape[0]):
                figures = _direct_figures(expected[h], r.distances, 4, 60, stack == "encoder")
                local.append(figures[0])
                decay.append(figures[4])
        got = r.buckets_shuffled(seed)
        # float32 tables: transformers' and posenc's expansions agree to rounding
        assert got["local_mass"] == pytest.approx(np.mean(local), abs=1e-6)
        assert got["decay"] == pytest.approx(np.mean(decay), abs=1e-5)


def test_t5_head_types_on_hand_made_tables(torch):
    model = _t5("t5", torch)
    table = np.zeros((32, 3))
    buckets = np.asarray(
        __import__("posenc").relative_position_bucket(np.arange(-300, 301), bidirectional=True)
    )
    table[buckets[300], 0] = 50.0  # head 0: all on d = 0: local
    table[np.unique(buckets[:290]), 1] = 5.0  # head 1: keys before: backward
    table[np.unique(buckets[310:]), 2] = 5.0  # head 2: keys after: forward
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.copy_(
            torch.from_numpy(table)
        )
    r = probe.t5_bucket_biases(model)
    assert r.head_type[0].tolist() == ["local", "backward", "forward"]
    assert "encoder.0: 1 local, 0 global, 1 backward, 1 forward" in r.summary()


def test_t5_result_outputs(torch, tmp_path):
    r = probe.t5_bucket_biases(_t5("t5", torch))
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d and d["bias"][1][0][-1] is None  # decoder: no key ahead
    assert r.to_markdown().count("\n| encoder.0 |") == 3
    assert r.plot(tmp_path / "t.svg") == tmp_path / "t.svg" and (tmp_path / "t.svg").stat().st_size


def test_t5_refuses_what_it_cannot_read(torch, tmp_path):
    with pytest.raises(ValueError, match=r"\(bloom\) is an alibi model: try --analyses alibi"):
        probe.t5_bucket_biases({"model_type": "bloom"})
    with pytest.raises(ValueError, match="a config alone holds no bias tables"):
        probe.t5_bucket_biases({"model_type": "t5"})
    with pytest.raises(ValueError, match="radius"):
        probe.t5_bucket_biases(_t5("t5", torch), radius=0)
    with pytest.raises(TypeError, match="source must be"):
        probe.t5_bucket_biases(3.5)


# ---------------------------------------------------------------- by name, from the Hub


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch = require("torch")
    require("transformers")
    from transformers import BloomConfig, BloomForCausalLM

    root = tmp_path_factory.mktemp("bias_models")
    torch.manual_seed(0)
    models = {
        "org/tiny-t5": _t5("t5", torch),
        "org/tiny-bloom": BloomForCausalLM(
            BloomConfig(vocab_size=40, hidden_size=24, n_layer=1, n_head=6)
        ),
    }
    out = {}
    for name, model in models.items():
        folder = root / name.replace("/", "--")
        model.save_pretrained(folder)
        out[name] = (str(folder), model)
    return out


@pytest.fixture
def hub(saved, tmp_path, monkeypatch):
    require("huggingface_hub")
    server = HubServer({n: Repo(folder_files(f)) for n, (f, _) in saved.items()}).start()
    use_local_hub(monkeypatch, server, tmp_path / "cache")
    yield server
    server.stop()


def test_t5_and_alibi_by_hub_name_from_the_command_line(hub, saved, tmp_path, capsys):
    js = tmp_path / "out.json"
    names = ["org/tiny-t5", "org/tiny-bloom"]
    assert main(["probe", *names, "--analyses", "alibi,t5_biases", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    data = {m["name"]: m for m in json.loads(js.read_text())["models"]}
    t5 = probe.t5_bucket_biases(saved["org/tiny-t5"][1])
    assert data["org/tiny-t5"]["t5_biases"]["head_type"] == t5.head_type.tolist()
    np.testing.assert_array_equal(np.array(data["org/tiny-t5"]["t5_biases"]["decay"]), t5.decay)
    assert (
        data["org/tiny-bloom"]["alibi"]["slopes"]
        == probe.alibi_windows(saved["org/tiny-bloom"][0]).slopes.tolist()
    )
    # each model of the other kind is skipped, saying what applies
    assert "alibi: skipped, org/tiny-t5@main on the Hub: alibi applies to ALiBi" in out
    assert "try --analyses t5_biases" in out and "try --analyses alibi" in out
    # only the bias tables were fetched from the T5 checkpoint, not its other weights
    table_bytes = sum(t.nbytes for t in t5.tables)
    file_size = len(hub.repos["org/tiny-t5"].files["model.safetensors"])
    assert hub.ranged_bytes("org/tiny-t5") < table_bytes + file_size // 4


def test_rope_usage_of_a_t5_or_bloom_says_what_applies(hub, capsys):
    assert main(["probe", "org/tiny-t5", "org/tiny-bloom", "--analyses", "rope_usage"]) == 0
    out = capsys.readouterr().out
    assert "no q_proj weights" in out and "fused" not in out
    assert "this is not a RoPE model (t5, t5): a T5-style model" in out
    assert "try --analyses t5_biases" in out
    assert "this is not a RoPE model (bloom, alibi): try --analyses alibi" in out


def test_one_name_of_another_kind_is_one_line_error(hub, capsys):
    assert main(["probe", "org/tiny-bloom", "--analyses", "t5_biases"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(bloom) is an alibi model: try --analyses alibi" in err[0]


# ---------------------------------------------------------------- ALiBi's measured spread

SPREAD_TEXTS = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5]]


@pytest.fixture(scope="module")
def bloom(torch):
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    config = BloomConfig(vocab_size=12, hidden_size=24, n_layer=2, n_head=6,
                         initializer_range=0.5, attn_implementation="eager")  # fmt: skip
    return BloomForCausalLM(config).eval()


def _direct_spread(model, torch, ids):
    """Each layer's content logits q_i . k_j / sqrt(d) from its input and its
    fused query_key_value weight, by loops; their std over the keys j <= i."""
    with torch.no_grad():
        states = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    H, n, out = model.config.n_head, len(ids), []
    d = model.config.hidden_size // H
    for li, block in enumerate(model.transformer.h):
        with torch.no_grad():
            x = block.input_layernorm(states[li])[0].double().numpy()
        attn = block.self_attention
        W = attn.query_key_value.weight.detach().double().numpy()
        b = attn.query_key_value.bias.detach().double().numpy()
        fused = (x @ W.T + b).reshape(n, H, 3, d)  # BLOOM's layout: per head, q k v
        spreads = np.zeros(H)
        for h in range(H):
            rows = []
            for i in range(1, n):
                logits = [fused[i, h, 0] @ fused[j, h, 1] / np.sqrt(d) for j in range(i + 1)]
                rows.append(np.std(logits))
            spreads[h] = np.mean(rows)
        out.append(spreads)
    return np.stack(out)


def test_alibi_logit_spread_equals_the_direct_loops(bloom, torch):
    got = probe.alibi_logit_spread(bloom, SPREAD_TEXTS)
    expected = np.mean([_direct_spread(bloom, torch, ids) for ids in SPREAD_TEXTS], axis=0)
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    w = probe.alibi_windows(bloom, logit_spread=got.mean(axis=0))
    assert w.windows.tolist() == [
        _direct_windows([m], 3.0, s)[0] for m, s in zip(w.slopes, got.mean(axis=0))
    ]
    assert "(measured, per head)" in w.summary()
    assert len(w.to_dict()["logit_spread"]) == 6


def test_alibi_logit_spread_refusals(bloom, torch):
    with pytest.raises(ValueError, match="one per head \\(6\\), got shape \\(2,\\)"):
        probe.alibi_windows(bloom, logit_spread=[1.0, 2.0])
    with pytest.raises(ValueError, match="positive finite"):
        probe.alibi_windows(bloom, logit_spread=[1.0, 2.0, 0.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="try --analyses t5_biases"):
        probe.alibi_logit_spread(_t5("t5", torch), SPREAD_TEXTS)


def test_alibi_with_a_text_measures_the_spread_from_the_command_line(bloom, tmp_path, capsys):
    tokenizers = pytest.importorskip("tokenizers")
    import transformers

    words = [str(i) for i in range(12)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)},
                                                           unk_token="0"))  # fmt: skip
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    folder = tmp_path / "bloom"
    bloom.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="0").save_pretrained(
        folder
    )
    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(" ".join(map(str, ids)) for ids in SPREAD_TEXTS), "utf-8")
    js = tmp_path / "a.json"
    args = [str(folder), "--analyses", "alibi", "--text", str(text), "--json", str(js)]
    assert main(["probe", *args]) == 0
    data = json.loads(js.read_text())["alibi"]
    spread = probe.alibi_logit_spread(bloom, SPREAD_TEXTS).mean(axis=0)
    np.testing.assert_allclose(data["logit_spread"], spread, rtol=1e-6)
    assert "(measured, per head)" in capsys.readouterr().out
