"""probe.skip_position_perplexity: the skip-position attack through a real
forward pass of tiny transformers models, against the models' own loss and
against a model whose position table holds only every k-th row."""

import math

import numpy as np
import pytest
import tiny_models
from optional import require

# every test here runs a transformers model
require("torch")
require("transformers")


@pytest.fixture(scope="module")
def gpt2():
    return tiny_models.gpt2()


IDS = [3, 7, 1, 9, 12, 4, 4, 20, 2, 11]


def test_k_1_is_the_models_own_perplexity(gpt2):
    import torch

    from posenc import probe

    r = probe.skip_position_perplexity(gpt2, IDS, ks=(1,))
    with torch.no_grad():
        loss = gpt2(input_ids=torch.tensor([IDS]), labels=torch.tensor([IDS])).loss
    assert r.perplexity[1] == pytest.approx(math.exp(float(loss)), rel=1e-5)
    assert not r.pseudo and r.n_tokens == len(IDS)


@pytest.mark.parametrize("k", [2, 4])
def test_k_equals_a_model_whose_table_keeps_every_kth_row(gpt2, k):
    import copy

    import torch

    from posenc import probe

    r = probe.skip_position_perplexity(gpt2, IDS, ks=(k,))
    thinned = copy.deepcopy(gpt2)
    with torch.no_grad():
        rows = gpt2.transformer.wpe.weight[::k].clone()
        thinned.transformer.wpe = torch.nn.Embedding.from_pretrained(rows)
        loss = thinned(input_ids=torch.tensor([IDS]), labels=torch.tensor([IDS])).loss
    assert r.perplexity[k] == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_masked_lm_pseudo_perplexity_matches_a_loop_written_out():
    import torch

    from posenc import probe

    model = tiny_models.bert("BertForMaskedLM", seed=1)
    r = probe.skip_position_perplexity(model, IDS, ks=(1, 2), mask_token_id=0)
    for k in (1, 2):
        total = 0.0
        for i in range(len(IDS)):
            masked = list(IDS)
            masked[i] = 0
            with torch.no_grad():
                logits = model(
                    input_ids=torch.tensor([masked]),
                    position_ids=torch.arange(len(IDS))[None] * k,
                ).logits[0, i]
            total += float(torch.log_softmax(logits.double(), -1)[IDS[i]])
        assert r.perplexity[k] == pytest.approx(math.exp(-total / len(IDS)), rel=1e-6)
    assert r.pseudo and "| i * 2 |" in r.to_markdown()


def test_positions_past_the_table_are_refused_by_name(gpt2):
    from posenc import probe

    with pytest.raises(ValueError, match="input_ids: 20 tokens with k = 4 reach position id 76"):
        probe.skip_position_perplexity(gpt2, np.arange(20) % 30, ks=(1, 4))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        probe.skip_position_perplexity(gpt2, [3])
    with pytest.raises(ValueError, match="ks"):
        probe.skip_position_perplexity(gpt2, IDS, ks=(0,))


def test_layer_probe_is_the_paper_probe_on_each_layers_hidden_states(gpt2, tmp_path):
    import torch

    from posenc import probe

    ids = list(range(1, 25))
    r = probe.layer_position_probe(gpt2, ids, seeds=2)
    with torch.no_grad():
        states = gpt2(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    assert len(r.mae) == 3  # the embedding output and 2 layers
    for layer, h in enumerate(states):
        maes = [
            probe.absolute_position_regression(h[0].double().numpy(), seed=s).mae for s in (0, 1)
        ]
        assert r.mae[layer] == pytest.approx(np.mean(maes), abs=1e-9)
        assert r.mae_std[layer] == pytest.approx(np.std(maes), abs=1e-9)
    pytest.importorskip("matplotlib")
    assert r.plot(tmp_path / "layers.png") == tmp_path / "layers.png"
    with pytest.raises(ValueError, match="at least 5 tokens"):
        probe.layer_position_probe(gpt2, [1, 2, 3])


# ---------------------------------------------------------------- RoPE usage from activations


def _pair_norms(x, heads, head_dim):
    """Mean over tokens of each half-layout pair's norm: (heads, head_dim / 2)."""
    x = x.reshape(x.shape[0], heads, head_dim).double()
    a, b = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return (a * a + b * b).sqrt().mean(dim=0).numpy()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_rope_activation_usage_is_the_pair_norms_of_each_layers_queries_and_keys(family):
    import torch

    from posenc import probe

    if family == "llama":
        model = tiny_models.llama()
    else:  # its q_norm and k_norm come between the projection and the rotation
        model = tiny_models.llama("Qwen3ForCausalLM", config="Qwen3Config", head_dim=8)
    ids = [1, 5, 9, 2, 33, 7, 7, 12]
    r = probe.rope_activation_usage(model, ids)
    with torch.no_grad():
        states = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        for i, layer in enumerate(model.model.layers):
            attn, h = layer.self_attn, layer.input_layernorm(states[i][0])
            q, k = attn.q_proj(h).view(len(ids), 4, 8), attn.k_proj(h).view(len(ids), 2, 8)
            if family == "qwen3":
                q, k = attn.q_norm(q), attn.k_norm(k)
            np.testing.assert_allclose(r.queries.usage[i], _pair_norms(q, 4, 8), rtol=1e-6)
            np.testing.assert_allclose(r.keys.usage[i], _pair_norms(k, 2, 8), rtol=1e-6)
    assert r.queries.usage.shape == (2, 4, 4) and r.keys.usage.shape == (2, 2, 4)
    np.testing.assert_allclose(r.queries.frequencies, 500000.0 ** (-np.arange(4) / 4))
    assert r.n_tokens == len(ids)


def test_rope_activation_usage_leaves_the_model_as_it_was(tmp_path):
    import torch
    from transformers.models.llama import modeling_llama

    from posenc import probe

    model = tiny_models.llama()
    before = modeling_llama.apply_rotary_pos_emb
    r = probe.rope_activation_usage(model, [1, 2, 3])
    assert modeling_llama.apply_rotary_pos_emb is before
    with pytest.raises(ValueError, match="no attention module"):
        probe.rope_activation_usage(tiny_models.gpt2(), [1, 2, 3])  # learned positions
    assert modeling_llama.apply_rotary_pos_emb is before
    pytest.importorskip("matplotlib")
    assert r.plot(tmp_path / "usage.png").read_bytes().startswith(b"\x89PNG")
    assert torch.is_grad_enabled()


def _own_pseudo_perplexity(model, ids, mask, positions=None):
    """Each token masked in turn, the model run as it runs itself (its own
    position ids, unless `positions` are given), written out token by token."""
    import torch

    total = 0.0
    for i in range(len(ids)):
        masked = list(ids)
        masked[i] = mask
        kwargs = {} if positions is None else {"position_ids": torch.tensor([positions])}
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked]), **kwargs).logits[0, i]
        total += float(torch.log_softmax(logits.double(), -1)[ids[i]])
    return math.exp(-total / len(ids))


@pytest.mark.parametrize("pad", [1, 3])
def test_k_1_is_a_roberta_models_own_pseudo_perplexity(pad):
    from posenc import probe

    model = tiny_models.roberta("RobertaForMaskedLM", seed=2, pad_token_id=pad)
    ids = [i for i in IDS if i != pad]
    r = probe.skip_position_perplexity(model, ids, ks=(1, 2), mask_token_id=0)
    assert r.first_id == pad + 1
    assert r.perplexity[1] == pytest.approx(_own_pseudo_perplexity(model, ids, 0), rel=1e-6)
    # k = 2 counts from the model's first position: pad + 1, pad + 3, ...
    skipped = [pad + 1 + 2 * i for i in range(len(ids))]
    assert r.perplexity[2] == pytest.approx(
        _own_pseudo_perplexity(model, ids, 0, skipped), rel=1e-6
    )
    assert f"| {pad + 1} + i * 2 |" in r.to_markdown()
    # the last id the table holds: pad + 1 + (n - 1) * k < max_position_embeddings
    most = (66 - 1 - (pad + 1)) // 4 + 1
    probe.skip_position_perplexity(model, np.arange(most) % 30 + 5, ks=(4,), mask_token_id=0)
    with pytest.raises(ValueError, match=f"give at most {most} tokens"):
        probe.skip_position_perplexity(
            model, np.arange(most + 1) % 30 + 5, ks=(4,), mask_token_id=0
        )


def test_k_1_is_an_opt_models_own_perplexity():
    import torch

    from posenc import probe

    model = tiny_models.opt("OPTForCausalLM", seed=3)
    r = probe.skip_position_perplexity(model, IDS, ks=(1,))
    with torch.no_grad():
        loss = model(input_ids=torch.tensor([IDS]), labels=torch.tensor([IDS])).loss
    assert r.first_id == 0
    assert r.perplexity[1] == pytest.approx(math.exp(float(loss)), rel=1e-6)


# ---------------------------------------------------------------- the noise of the forward analyses


def _with_table(model, table):
    """A copy of the GPT-2 `model` whose position table is `table`."""
    import copy

    import torch

    other = copy.deepcopy(model)
    with torch.no_grad():
        other.transformer.wpe.weight.copy_(torch.from_numpy(table).float())
    return other


def _random_rows(E, seed):
    """A Gaussian table of E's shape, row p scaled to E[p]'s norm, written out."""
    g = np.random.default_rng([seed, 0]).standard_normal(E.shape)
    return g * (np.linalg.norm(E, axis=1) / np.linalg.norm(g, axis=1))[:, None]


def test_skip_perplexity_noise_is_the_models_loss_with_noisy_positions(gpt2):
    import torch

    from posenc import probe

    before = gpt2.transformer.wpe.weight.detach().clone()
    r = probe.skip_position_perplexity(gpt2, IDS, ks=(1, 2), baselines=2)
    assert torch.equal(gpt2.transformer.wpe.weight, before)  # the table is given back
    assert sorted(r.baselines) == ["random", "shuffled"]
    E = before.double().numpy()
    ids = torch.tensor([IDS])
    for seed in (0, 1):
        noisy = _with_table(gpt2, _random_rows(E, seed))
        for k in (1, 2):
            positions = torch.arange(len(IDS))[None] * k
            with torch.no_grad():
                loss = noisy(input_ids=ids, position_ids=positions, labels=ids).loss
            assert r.baselines["random"][k][seed] == pytest.approx(math.exp(float(loss)), rel=1e-5)
            order = np.random.default_rng([seed, 1]).permutation(len(IDS))
            with torch.no_grad():
                loss = gpt2(
                    input_ids=ids, position_ids=torch.tensor(order)[None] * k, labels=ids
                ).loss
            assert r.baselines["shuffled"][k][seed] == pytest.approx(
                math.exp(float(loss)), rel=1e-5
            )
    d = r.to_dict()["baselines"]
    assert d["shuffled"]["2"]["per_seed"] == list(r.baselines["shuffled"][2])
    assert "position ids shuffled: k=1:" in r.noise_line()
    assert probe.skip_position_perplexity(gpt2, IDS, ks=(1,)).baselines == {}


def test_layer_probe_noise_is_the_probe_on_the_states_of_noisy_positions(gpt2):
    import torch

    from posenc import probe

    ids = list(range(1, 25))
    r = probe.layer_position_probe(gpt2, ids, seeds=1, baselines=2)
    E = gpt2.transformer.wpe.weight.detach().double().numpy()
    for seed in (0, 1):
        noisy = _with_table(gpt2, _random_rows(E, seed))
        order = np.random.default_rng([seed, 1]).permutation(len(ids))
        with torch.no_grad():
            rand = noisy(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
            shuf = gpt2(
                input_ids=torch.tensor([ids]),
                position_ids=torch.tensor(order)[None],
                output_hidden_states=True,
            ).hidden_states
        for kind, states in (("random", rand), ("shuffled", shuf)):
            maes = [probe.absolute_position_regression(h[0].double().numpy(), seed=seed).mae
                    for h in states]  # fmt: skip
            np.testing.assert_allclose(r.baselines[kind][seed], maes, atol=1e-9)
    assert r.baselines["random"].shape == (2, 3)
    assert r.to_dict()["baselines"]["shuffled"]["per_seed"] == r.baselines["shuffled"].tolist()


def test_a_model_without_a_position_table_has_only_the_shuffled_ids():
    from posenc.probe import forward

    llama = tiny_models.llama()
    assert forward.position_tables(llama) == [] and forward.forward_kinds(llama) == ("shuffled",)
    bert = tiny_models.bert()
    assert forward.forward_kinds(bert) == ("random", "shuffled")
    assert [t for t in forward.position_tables(bert)] == [bert.embeddings.position_embeddings]


def test_rope_activation_noise_random_projections_and_shuffled_pairs():
    import copy

    import torch

    from posenc import probe

    model = tiny_models.llama()
    texts = [[1, 5, 9, 2, 33, 7, 7, 12], [3, 4, 5, 6, 7]]
    before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    r = probe.rope_activation_usage(model, texts, baselines=2)
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, before)

    def slow_half(usage):  # the share of norm² on the slowest half, by hand
        energy = usage**2
        share = (energy / energy.sum(axis=-1, keepdims=True)).mean(axis=(0, 1))
        return share[len(share) // 2 :].sum()

    for seed in (0, 1):
        for what, usage in (("queries", r.queries.usage), ("keys", r.keys.usage)):
            shuffled = np.random.default_rng([seed, 1]).permuted(usage, axis=-1)
            assert r.baselines["shuffled"][what][seed] == pytest.approx(slow_half(shuffled))
        noisy = copy.deepcopy(model)
        m = 0
        with torch.no_grad():
            for layer in noisy.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    W = proj.weight.double().numpy()
                    g = np.random.default_rng([seed, 2, m]).standard_normal(W.shape)
                    g *= (np.linalg.norm(W, axis=1) / np.linalg.norm(g, axis=1))[:, None]
                    proj.weight.copy_(torch.from_numpy(g).float())
                    m += 1
        plain = probe.rope_activation_usage(noisy, texts)
        assert r.baselines["random"]["queries"][seed] == pytest.approx(
            slow_half(plain.queries.usage), rel=1e-9
        )
        assert r.baselines["random"]["keys"][seed] == pytest.approx(
            slow_half(plain.keys.usage), rel=1e-9
        )
    assert r.queries.slow_half() == pytest.approx(slow_half(r.queries.usage))
    assert "pairs shuffled: queries" in r.noise_line()
    with pytest.raises(ValueError, match="baselines"):
        probe.rope_activation_usage(model, texts, baselines=-1)
