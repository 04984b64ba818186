"""posenc.probe's position terms of the attention logits on texts
(relative_share for DeBERTa-v2 and XLNet, rope_logit_share and the
many-text rope_activation_usage for RoPE models) against direct loops over
the definitions from each layer's input and weights, whose terms are first
checked to sum to the logits behind transformers' own attention
probabilities; and from the command line, by model name."""

import json

import numpy as np
import pytest
import tiny_models

from posenc import probe
from posenc.__main__ import main

TEXTS = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5,
         2, 3, 5, 3], [0, 1, 2, 3, 4]]  # fmt: skip


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np(t):
    return t.detach().double().numpy()


def _mean_abs(term, causal=False):
    n = term.shape[-1]
    pairs = [(i, j) for i in range(n) for j in range(n) if not causal or j <= i]
    return np.array([np.mean([abs(term[h, i, j]) for i, j in pairs]) for h in range(len(term))])


# ---------------------------------------------------------------- DeBERTa-v2


@pytest.fixture(scope="module")
def deberta(torch):
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(0)
    config = DebertaV2Config(
        vocab_size=12, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, relative_attention=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=16, position_buckets=8, share_att_key=True,
        norm_rel_ebd="layer_norm", attn_implementation="eager",
    )  # fmt: skip
    return DebertaV2Model(config).eval()


def _deberta_terms(model, torch, ids):
    """c2c, c2p, p2c of every layer by loops over He et al.'s definition."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True,
                    output_attentions=True)  # fmt: skip
        rel_emb = model.encoder.get_rel_embedding()
    n, layers = len(ids), []
    dummy = torch.zeros(1, n, 1)
    rel = build_relative_position(dummy, dummy, bucket_size=8, max_position=16)[0].numpy()
    for li, layer in enumerate(model.encoder.layer):
        att = layer.attention.self
        H, span = att.num_attention_heads, att.pos_ebd_size
        d = att.attention_head_size
        x = _np(out.hidden_states[li][0])
        W = {k: (_np(getattr(att, k).weight), _np(getattr(att, k).bias)) for k in
             ("query_proj", "key_proj")}  # fmt: skip
        r = _np(rel_emb)[: 2 * span]
        q = (x @ W["query_proj"][0].T + W["query_proj"][1]).reshape(n, H, d)
        k = (x @ W["key_proj"][0].T + W["key_proj"][1]).reshape(n, H, d)
        qr = (r @ W["query_proj"][0].T + W["query_proj"][1]).reshape(-1, H, d)
        kr = (r @ W["key_proj"][0].T + W["key_proj"][1]).reshape(-1, H, d)
        s = np.sqrt(d * 3)
        terms = np.zeros((3, H, n, n))
        for h in range(H):
            for i in range(n):
                for j in range(n):
                    c2p_index = min(max(rel[i, j] + span, 0), 2 * span - 1)
                    p2c_index = min(max(-rel[j, i] + span, 0), 2 * span - 1)
                    terms[0, h, i, j] = q[i, h] @ k[j, h] / s
                    terms[1, h, i, j] = q[i, h] @ kr[c2p_index, h] / s
                    terms[2, h, i, j] = k[j, h] @ qr[p2c_index, h] / s
        # the three sum to the logits behind transformers' attention
        np.testing.assert_allclose(
            _softmax(terms.sum(axis=0)), _np(out.attentions[li][0]), atol=1e-6
        )
        layers.append(terms)
    return layers


def test_deberta_shares_equal_the_direct_terms(deberta, torch):
    r = probe.relative_share(deberta, TEXTS, name="tiny deberta")
    assert r.terms == ("c2c", "c2p", "p2c") and r.n_tokens == [12, 20, 5]
    for t, ids in enumerate(TEXTS):
        for li, terms in enumerate(_deberta_terms(deberta, torch, ids)):
            expected = np.stack([_mean_abs(term) for term in terms], axis=-1)
            np.testing.assert_allclose(r.mean_abs[t, li], expected, rtol=1e-5)
    per_text = r.mean_abs / r.mean_abs.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(r.share, per_text.mean(axis=0))
    np.testing.assert_allclose(r.share_std, per_text.std(axis=0))


# ---------------------------------------------------------------- XLNet


@pytest.fixture(scope="module")
def xlnet(torch):
    from transformers import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=12, d_model=16, n_layer=2, n_head=2, d_inner=32,
                         attn_implementation="eager")  # fmt: skip
    return XLNetLMHeadModel(config).eval()


def _xlnet_terms(model, torch, ids):
    """Transformer-XL's content (a + c) and position (b + d) terms by loops."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True,
                    output_attentions=True)  # fmt: skip
    n, layers = len(ids), []
    D = model.config.d_model
    inv_freq = 1.0 / 10000 ** (np.arange(0, D, 2.0) / D)
    pos_seq = np.arange(n, -n, -1.0)  # relative distance of row t: n - t
    pos_emb = np.concatenate([np.sin(np.outer(pos_seq, inv_freq)),
                              np.cos(np.outer(pos_seq, inv_freq))], axis=-1)  # fmt: skip
    for li, layer in enumerate(model.transformer.layer):
        att = layer.rel_attn
        x = _np(out.hidden_states[li][0])
        q = np.einsum("ih,hnd->ind", x, _np(att.q))
        k = np.einsum("ih,hnd->ind", x, _np(att.k))
        kr = np.einsum("ih,hnd->ind", pos_emb, _np(att.r))
        u, v = _np(att.r_w_bias), _np(att.r_r_bias)
        H, d = u.shape
        terms = np.zeros((2, H, n, n))
        for h in range(H):
            for i in range(n):
                for j in range(n):
                    terms[0, h, i, j] = (q[i, h] + u[h]) @ k[j, h] / np.sqrt(d)
                    terms[1, h, i, j] = (q[i, h] + v[h]) @ kr[n - (i - j), h] / np.sqrt(d)
        np.testing.assert_allclose(
            _softmax(terms.sum(axis=0)), _np(out.attentions[li][0]), atol=1e-6
        )
        layers.append(terms)
    return layers


def test_xlnet_shares_equal_the_direct_terms(xlnet, torch):
    r = probe.relative_share(xlnet, TEXTS[:2])
    assert r.terms == ("content", "position") and r.name == "XLNetLMHeadModel"
    for t, ids in enumerate(TEXTS[:2]):
        for li, terms in enumerate(_xlnet_terms(xlnet, torch, ids)):
            expected = np.stack([_mean_abs(term) for term in terms], axis=-1)
            np.testing.assert_allclose(r.mean_abs[t, li], expected, rtol=1e-5)


# ---------------------------------------------------------------- RoPE


@pytest.fixture(scope="module")
def llama(torch):
    model = tiny_models.llama(vocab_size=12)
    model.config._attn_implementation = "eager"
    return model.eval()


def _llama_qk(model, torch, ids):
    """Per layer, the queries and keys before and after the rotation, by
    loops over RoFormer's definition (Llama's halves)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True,
                    output_attentions=True)  # fmt: skip
    c = model.config
    H, K, d = c.num_attention_heads, c.num_key_value_heads, c.hidden_size // c.num_attention_heads
    inv_freq = 500000.0 ** (-np.arange(0, d, 2.0) / d)  # tiny_models.llama's rope_theta
    n, layers = len(ids), []
    for li, layer in enumerate(model.model.layers):
        with torch.no_grad():
            x = _np(layer.input_layernorm(out.hidden_states[li])[0])
        q = (x @ _np(layer.self_attn.q_proj.weight).T).reshape(n, H, d)
        k = (x @ _np(layer.self_attn.k_proj.weight).T).reshape(n, K, d)

        def rotate(a):
            b = a.copy()
            for p in range(n):
                for pair in range(d // 2):
                    cos, sin = np.cos(p * inv_freq[pair]), np.sin(p * inv_freq[pair])
                    x1, x2 = a[p, :, pair], a[p, :, pair + d // 2]
                    b[p, :, pair] = x1 * cos - x2 * sin
                    b[p, :, pair + d // 2] = x2 * cos + x1 * sin
            return b

        layers.append((q, k, rotate(q), rotate(k), _np(out.attentions[li][0])))
    return layers


def test_rope_logit_share_equals_the_direct_split(llama, torch):
    r = probe.rope_logit_share(llama, TEXTS)
    assert r.terms == ("content", "position") and r.mean_abs.shape == (3, 2, 4, 2)
    for t, ids in enumerate(TEXTS):
        n = len(ids)
        for li, (q, k, q_rot, k_rot, attention) in enumerate(_llama_qk(llama, torch, ids)):
            H, K, d = q.shape[1], k.shape[1], q.shape[2]
            terms = np.zeros((2, H, n, n))
            for h in range(H):
                kv = h // (H // K)
                for i in range(n):
                    for j in range(n):
                        full = q_rot[i, h] @ k_rot[j, kv] / np.sqrt(d)
                        terms[0, h, i, j] = q[i, h] @ k[j, kv] / np.sqrt(d)
                        terms[1, h, i, j] = full - terms[0, h, i, j]
            causal = np.where(np.tril(np.ones((n, n))) > 0, terms.sum(axis=0), -np.inf)
            np.testing.assert_allclose(_softmax(causal), attention, atol=1e-6)
            expected = np.stack([_mean_abs(term, causal=True) for term in terms], axis=-1)
            np.testing.assert_allclose(r.mean_abs[t, li], expected, rtol=1e-5)
    both = probe.rope_logit_share(llama, TEXTS[:1], causal=False)
    assert (both.mean_abs[0] != r.mean_abs[0]).all()  # the upper half counts then


def test_rope_activation_usage_over_several_texts(llama, torch):
    r = probe.rope_activation_usage(llama, TEXTS)
    assert r.n_texts == 3 and r.n_tokens == 37
    q_texts, k_texts = [], []
    for ids in TEXTS:
        per_layer = _llama_qk(llama, torch, ids)
        for store, which in ((q_texts, 0), (k_texts, 1)):
            usage = []
            for layer in per_layer:
                a = layer[which]  # (n, heads, d) before the rotation
                half = a.shape[-1] // 2
                usage.append(np.sqrt(a[..., :half] ** 2 + a[..., half:] ** 2).mean(axis=0))
            store.append(np.stack(usage))
    for got, std, texts in ((r.queries, r.queries_share_std, q_texts),
                            (r.keys, r.keys_share_std, k_texts)):  # fmt: skip
        np.testing.assert_allclose(got.usage, np.mean(texts, axis=0), rtol=1e-5)
        shares = [t**2 / (t**2).sum(axis=-1, keepdims=True) for t in texts]
        np.testing.assert_allclose(std, np.std(shares, axis=0), rtol=1e-4, atol=1e-9)
    one = probe.rope_activation_usage(llama, TEXTS[1])  # one text: as before
    assert one.n_texts == 1 and not one.queries_share_std.any()
    d = r.to_dict()
    assert d["n_texts"] == 3 and len(d["queries"]["share_std"]) == 2
    assert "3 texts; the slowest half's share varies by" in r.summary()


def test_results_render(llama, tmp_path):
    r = probe.rope_logit_share(llama, TEXTS[:2], name="tiny llama")
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d and d["n_texts"] == 2
    assert r.to_markdown().startswith("| layer | head | content | position |")
    assert "tiny llama" not in r.summary() and "2 texts, 32 tokens" in r.summary()
    assert r.plot(tmp_path / "s.png") == tmp_path / "s.png" and (tmp_path / "s.png").stat().st_size


def test_each_analysis_says_which_fits_a_model_of_another_kind(llama, deberta, xlnet):
    with pytest.raises(ValueError, match=r"\(llama\) is a rope model: try --analyses rope_usage"):
        probe.relative_share(llama, TEXTS)
    with pytest.raises(ValueError, match=r"\(deberta-v2\) is a relative model: try --analyses rel"):
        probe.rope_logit_share(deberta, TEXTS)
    with pytest.raises(ValueError, match="relative_share"):
        probe.rope_activation_usage(xlnet, TEXTS)
    with pytest.raises(ValueError, match=r"texts\[0\] must be a 1-D sequence of at least 2"):
        probe.relative_share(deberta, [[1]])
    with pytest.raises(ValueError, match="text 0 has 1 token"):
        probe.rope_logit_share(llama, [[1]])
    with pytest.raises(TypeError, match="causal"):
        probe.rope_logit_share(llama, TEXTS, causal=1)


# ---------------------------------------------------------------- the command line

WORDS = tiny_models.WORDS  # the words of tiny_models.save_with_tokenizer's tokenizer
PARAGRAPHS = [
    "the quick brown fox jumps over the lazy dog .",
    "the lazy dog jumps .",
    "the dog",  # under 5 tokens: not a text
    "over the quick dog the brown fox jumps over the lazy dog .",
]


def test_text_analyses_by_name_from_the_command_line(llama, deberta, xlnet, tmp_path, capsys):
    pytest.importorskip("tokenizers")
    folders = [
        tiny_models.save_with_tokenizer(m, tmp_path / n)
        for n, m in (("llama", llama), ("deberta", deberta), ("xlnet", xlnet))
    ]
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(PARAGRAPHS) + "\n", encoding="utf-8")
    js = tmp_path / "out.json"
    args = ["--analyses", "rope_activations,rope_logits,relative_share", "--text", str(text)]
    assert main(["probe", *folders, *args, "--json", str(js)]) == 0
    out = capsys.readouterr().out
    ids = [[WORDS.index(w) for w in p.split()] for p in PARAGRAPHS if len(p.split()) >= 5]
    models = json.loads(js.read_text())["models"]
    assert "--text: 3 paragraphs read as texts of their own (28 tokens" in out
    assert "--text: 30 tokens (at most 512) read by XLNetLMHeadModel" in out
    np.testing.assert_allclose(
        models[0]["rope_logits"]["share"], probe.rope_logit_share(llama, ids).share
    )
    np.testing.assert_allclose(
        models[0]["rope_activations"]["queries"]["usage"],
        probe.rope_activation_usage(llama, ids).queries.usage,
    )
    for entry, model in ((models[1], deberta), (models[2], xlnet)):
        np.testing.assert_allclose(
            entry["relative_share"]["share_std"], probe.relative_share(model, ids).share_std
        )
        assert "rope_logits" in entry["skipped"] and "rope_activations" in entry["skipped"]
    assert "relative_share: skipped, LlamaForCausalLM: relative_share applies to relative" in out


def test_relative_share_by_hub_name(deberta, llama, tmp_path, monkeypatch, capsys):
    from hub_server import HubServer, Repo, folder_files, use_local_hub

    pytest.importorskip("tokenizers")
    repos = {}
    for name, model in (("org/tiny-deberta", deberta), ("org/tiny-llama", llama)):
        folder = tiny_models.save_with_tokenizer(model, tmp_path / name.replace("/", "--"))
        repos[name] = Repo(folder_files(folder))
    server = HubServer(repos).start()
    try:
        # transformers downloads the models: huggingface_hub's endpoint, read at import
        use_local_hub(monkeypatch, server, tmp_path / "cache", downloads=True)
        text = tmp_path / "text.txt"
        text.write_text("\n\n".join(PARAGRAPHS), encoding="utf-8")
        js = tmp_path / "out.json"
        names = ["org/tiny-deberta", "org/tiny-llama"]
        analyses = "relative_share,rope_logits,rope_activations"
        args = ["--analyses", analyses, "--text", str(text), "--json", str(js)]
        assert main(["probe", *names, *args]) == 0
    finally:
        server.stop()
    ids = [[WORDS.index(w) for w in p.split()] for p in PARAGRAPHS if len(p.split()) >= 5]
    deberta_entry, llama_entry = json.loads(js.read_text())["models"]
    np.testing.assert_allclose(
        deberta_entry["relative_share"]["share"], probe.relative_share(deberta, ids).share
    )
    np.testing.assert_allclose(
        llama_entry["rope_logits"]["share"], probe.rope_logit_share(llama, ids).share
    )
    assert "try --analyses relative_share" in deberta_entry["skipped"]["rope_logits"]
    np.testing.assert_allclose(
        llama_entry["rope_activations"]["keys"]["share_std"],
        probe.rope_activation_usage(llama, ids).keys_share_std,
        atol=1e-7,  # float32 forward passes of the loaded and the in-memory model
    )


def test_rope_usage_tables_in_markdown(llama):
    r = probe.rope_activation_usage(llama, TEXTS)
    table = r.queries.to_markdown().splitlines()
    assert table[0] == "| layer | head | fastest half | slowest half | slowest pair |"
    share = r.queries.share()[1, 3]
    assert table[2 + 4 + 3] == (
        f"| 1 | 3 | {100 * share[:2].sum():.1f}% | {100 * share[2:].sum():.1f}% | "
        f"{100 * share[-1]:.1f}% |"
    )
    text = r.to_markdown()
    assert text.startswith("Queries:") and "\nKeys:\n" in text and text.endswith(r.summary())


@pytest.mark.parametrize(
    "call",
    [
        lambda: probe.relative_share(3, TEXTS),
        lambda: probe.rope_logit_share(object(), TEXTS),
        lambda: probe.rope_activation_usage(None, TEXTS),
    ],
)
def test_a_model_that_is_no_transformers_model_is_a_type_error(call):
    with pytest.raises(TypeError, match="model must be a transformers model"):
        call()


def test_texts_that_are_no_token_ids_are_refused(deberta, llama):
    with pytest.raises(TypeError, match="texts must be token ids"):
        probe.relative_share(deberta, "the text")
    with pytest.raises(TypeError, match="input_ids must be token ids"):
        probe.rope_logit_share(llama, "the text")
    with pytest.raises(TypeError, match=r"input_ids\[0\] must hold integer token ids"):
        probe.rope_activation_usage(llama, [[0.5, 1.5]])
    with pytest.raises(ValueError, match="texts must hold at least one text"):
        probe.relative_share(deberta, [])
