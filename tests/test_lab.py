"""posenc.lab: the model, each encoding at its point, training, resume, compare, the CLI.

The witnesses are written here: attention by torch's own
scaled_dot_product_attention, the rotation by posenc's NumPy kernels
(posenc.apply_rope, which the model does not call), ALiBi's and
Transformer-XL's terms by their formulas, perplexity and accuracy recomputed
from a checkpoint's model, mean and standard deviation by NumPy.  torch is
required under POSENC_REQUIRE_CONFORMANCE=1 and the tests are skipped
without it otherwise.
"""

import json
import math
import os
import sys

import numpy as np
import pytest
from lab_standins import classification_data, copy_task, text_data
from optional import require

import posenc

torch = require("torch")

import posenc.torch as pt  # noqa: E402
from posenc import lab  # noqa: E402
from posenc.lab import encodings as E  # noqa: E402
from posenc.lab import model as M  # noqa: E402
from posenc.lab.model import LabModel  # noqa: E402
from posenc.lab.train import (  # noqa: E402
    ClassificationProblem,
    LanguageModelProblem,
    TaskProblem,
    TrainConfig,
    run,
)

TINY = {"dim": 32, "layers": 2, "heads": 4}
FEW = TrainConfig(steps=12, batch_size=8, lr=3e-3, eval_samples=16, eval_batch_size=16)

#: every encoding, and variants of the options and samplers
VARIANTS = list(lab.ENCODINGS) + [
    "rope:xpos",
    "rope:p:0.5",
    "rope:yarn:4",
    "rope:linear:2:scaling_at=always",
    "learned:sinusoid:freeze",
    "sinusoid+randomized",
    "rope+pose",
    "alibi+randomized",
    "t5+pose",
    "fire+randomized",
    "xl+randomized",
]


def _copy(length=9):
    return TaskProblem(copy_task(), length)


# -- encodings by name ---------------------------------------------------------------


def test_encoding_strings_and_dicts_read_the_same():
    s = lab.encoding("rope:yarn:4+randomized:256")
    assert (s.name, s.sampler, s.max_len) == ("rope", "randomized", 256)
    assert s.options["scaling"] == {"rope_type": "yarn", "factor": 4.0}
    d = lab.encoding({"name": "rope", "scaling": "yarn:4", "sampler": "randomized", "max_len": 256})
    assert (d.options, d.sampler, d.max_len) == (s.options, s.sampler, s.max_len)
    assert lab.encoding("rope:p:0.75").options == {"p": 0.75}
    assert lab.encoding("rope:xpos:base=500").options == {"xpos": True, "base": 500.0}
    assert lab.encoding("learned:gpt2:freeze").options == {"init": "gpt2", "freeze": True}
    assert lab.encoding("t5:num_buckets=16").options == {"num_buckets": 16}
    assert lab.encoding("rope:none").options == {}  # plain RoPE
    assert lab.encoding("alibi").kind == "scores" and lab.encoding("rope").kind == "rotary"


@pytest.mark.parametrize(
    "spec, error, words",
    [
        ("rotary", ValueError, "not an encoding of the lab"),
        ("rope:bogus", ValueError, "not a RoPE option"),
        ("rope:yarn", ValueError, "takes its factor after it"),
        ("rope:yarn:4:p:0.5", ValueError, "two RoPE families"),
        ("rope:p:1.5", ValueError, "in (0, 1]"),
        ("alibi:hidden=3", ValueError, "'hidden' is not an option of 'alibi'"),
        ("nope+randomized", ValueError, "takes no position ids"),
        ("cope+pose", ValueError, "counts its own from the gates"),
        ("rope+shuffle", ValueError, "not a position sampler"),
        ("rope+pose:x", ValueError, "whole number"),
        ("t5:num_buckets=1", ValueError, "num_buckets"),
        (3, TypeError, "must be a string"),
    ],
)
def test_bad_encodings_are_refused_naming_what(spec, error, words):
    with pytest.raises(
        error, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        lab.encoding(spec)


def test_every_name_of_encodings_has_a_kind_and_its_module():
    assert set(lab.ENCODINGS) == set(E.KINDS)
    assert set(E.MODULES) <= set(lab.ENCODINGS)
    for name, module in E.MODULES.items():
        assert E.torch_module(name) is getattr(pt, module)


# -- the model: attention and each plug-in point -----------------------------------


def _qkv(model, x):
    """q, k, v of the first block, as the model forms them."""
    block = model.blocks[0]
    b, n, d = x.shape
    h = block.norm1(x)
    q, k, v = (
        block.attention.qkv(h).view(b, n, 3, model.heads, d // model.heads).permute(2, 0, 3, 1, 4)
    )
    return q, k, v


def test_nope_attention_equals_torch_sdpa():
    torch.manual_seed(0)
    model = LabModel(11, "nope", **TINY).eval()
    tokens = torch.randint(0, 11, (2, 7))
    x = model.embed(tokens)
    q, k, v = _qkv(model, x)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = model.blocks[0].attention.out(want.transpose(1, 2).reshape(2, 7, 32))
    pos = M.positions_of(None, 2, 7, torch.device("cpu"))
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    got = model.blocks[0].attention(model.blocks[0].norm1(x), 0, model.encoding, pos, allowed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _witness_bias(model, spec, n, causal):
    """The bias of the first layer, (heads, n, n), from the encoding's own
    posenc.torch module (ALiBi's by hand: its slopes times the distances)."""
    enc = model.encoding
    if spec == "alibi":
        slopes = torch.tensor(2.0 ** (-8.0 * np.arange(1, 5) / 4), dtype=torch.float64)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        distance = (i - j).double() if causal else (i - j).abs().double()
        bias = -slopes[:, None, None] * distance
        return bias.masked_fill(j > i, -math.inf).float() if causal else bias.float()
    if spec == "t5":
        return enc.table(n, n)[0]
    return enc.layers[0].bias(n, n)


@pytest.mark.parametrize("spec", ["alibi", "t5", "kerple_log", "sandwich", "fire"])
@pytest.mark.parametrize("kind", ["decoder", "encoder"])
def test_bias_attention_equals_torch_sdpa_with_the_bias_in_its_mask(spec, kind):
    """The scores' scale, mask and bias, added in one pass: torch's
    scaled_dot_product_attention with the bias plus the mask as its
    attn_mask, for a decoder and for an encoder with padding."""
    torch.manual_seed(0)
    options = dict(kind="encoder", n_classes=3, pad_id=0) if kind == "encoder" else {}
    model = LabModel(11, spec, **options, **TINY).eval()
    if spec == "t5":
        with torch.no_grad():
            model.encoding.table.weight.normal_()  # (zeros at first)
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [5, 6, 7, 8, 2, 0, 0]])
    n = tokens.shape[1]
    if kind == "decoder":
        allowed = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    else:
        allowed = (tokens != 0)[:, None, None, :]
    x = model.embed(tokens)
    q, k, v = _qkv(model, x)
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, -math.inf)
    bias = _witness_bias(model, spec, n, causal=kind == "decoder")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias + mask)
    want = model.blocks[0].attention.out(want.transpose(1, 2).reshape(2, n, 32))
    pos = M.positions_of(None, 2, n, torch.device("cpu"))
    got = model.blocks[0].attention(model.blocks[0].norm1(x), 0, model.encoding, pos, allowed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_t5_s_table_makes_one_bias_per_forward_pass_for_every_layer(monkeypatch):
    """T5's table is shared by the layers: its bias is made once a forward
    pass (and its gradient by bucket once a backward), the same as a
    model that made it in each layer."""
    torch.manual_seed(0)
    model = LabModel(11, "t5", dim=32, layers=3, heads=4)
    with torch.no_grad():
        model.encoding.table.weight.normal_()
    calls = []
    table_forward = type(model.encoding.table).forward

    def counted(self, *args, **kwargs):
        calls.append(args)
        return table_forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model.encoding.table), "forward", counted)
    tokens = torch.randint(0, 11, (2, 6))
    model(tokens).square().mean().backward()
    assert calls == [(6, 6)]
    grad = model.encoding.table.weight.grad.clone()
    # the witness: each layer adds a bias of its own, made from the table
    model.zero_grad()
    monkeypatch.setattr(model.encoding, "shared", False)
    model(tokens).square().mean().backward()
    assert len(calls) == 1 + 3
    torch.testing.assert_close(model.encoding.table.weight.grad, grad, rtol=1e-5, atol=1e-7)


def test_sandwich_s_bias_is_made_once_for_every_layer_and_pass(monkeypatch):
    """Sandwich learns nothing: its layers' biases are one, made once per
    length; KERPLE's, learned, are made in each layer of each pass."""
    torch.manual_seed(0)
    calls = []
    for spec in ("sandwich", "kerple_log"):
        model = LabModel(11, spec, dim=32, layers=3, heads=4)
        cls = type(model.encoding.layers[0])
        bias = cls.bias

        def counted(self, *args, bias=bias, spec=spec, **kwargs):
            calls.append(spec)
            return bias(self, *args, **kwargs)

        monkeypatch.setattr(cls, "bias", counted)
        tokens = torch.randint(0, 11, (2, 6))
        first = model(tokens)
        torch.testing.assert_close(model(tokens), first, rtol=0, atol=0)
        model(torch.randint(0, 11, (2, 5)))
    assert calls.count("sandwich") == 2  # lengths 6 and 5
    assert calls.count("kerple_log") == 3 * 3


@pytest.mark.parametrize("spec", ["rope", "rope:xpos", "rope:p:0.5", "rope:yarn:4"])
def test_rope_rotates_q_and_k_as_posenc_apply_rope(spec):
    torch.manual_seed(0)
    model = LabModel(11, spec, train_length=8, **TINY)
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    ids = np.array([[0, 3, 4, 9, 10, 20], [1, 2, 3, 4, 5, 6]])
    pos = M.positions_of(ids, 2, 6, torch.device("cpu"))
    options = {}
    if spec == "rope:p:0.5":
        options["scaling"] = {"rope_type": "proportional", "partial_rotary_factor": 0.5}
    for training in (True, False):
        model.train(training)
        if spec == "rope:yarn:4" and not training:  # the family at evaluation only
            options["scaling"] = {
                "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8
            }  # fmt: skip
        rq, rk = model.encoding.rotate(q, k, pos)
        xq = "query" if spec == "rope:xpos" else None
        xk = "key" if spec == "rope:xpos" else None
        wq = posenc.apply_rope(q.numpy(), ids[:, None, :], xpos=xq, **options)
        wk = posenc.apply_rope(k.numpy(), ids[:, None, :], xpos=xk, **options)
        np.testing.assert_allclose(rq.numpy(), wq, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(rk.numpy(), wk, rtol=2e-5, atol=2e-6)


def test_alibi_at_skipped_positions_is_the_slope_times_their_distance():
    model = LabModel(11, "alibi", **TINY)
    ids = np.arange(5) * 3  # the skip attack's positions, k = 3
    pos = M.positions_of(ids, 1, 5, torch.device("cpu"))
    scores = torch.zeros(1, 4, 5, 5)
    got = model.encoding.add_scores(0, scores, None, None, pos)[0]
    slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)  # ALiBi's slopes for 4 heads
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    want = -slopes[:, None, None] * 3 * (i - j)
    low = np.broadcast_to(i >= j, want.shape)
    np.testing.assert_allclose(got.numpy()[low], want[low], rtol=1e-6)
    assert np.all(np.isneginf(got.numpy()[~low]))  # causal: the later keys


def _xl_by_hand(q, r_table, weight, u, v, k, ids):
    """(q_i + v) . (W R)[n - (p_i - p_j)] + u . k_j, scaled by head_dim ** -0.5."""
    b, h, n, d = q.shape
    r = (r_table @ weight.T).reshape(-1, h, d)  # (rows, heads, d)
    span = r_table.shape[0] - 1  # the "uni" table: rows for distances span .. 0
    out = np.zeros((b, h, n, n))
    for bi in range(b):
        p = ids[min(bi, ids.shape[0] - 1)]
        for i in range(n):
            for j in range(i + 1):
                row = r[span - (p[i] - p[j])]
                out[bi, :, i, j] = np.einsum("hd,hd->h", q[bi, :, i] + v, row) + np.einsum(
                    "hd,hd->h", u, k[bi, :, j]
                )
    return out / math.sqrt(d)


@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize("sampled", [False, True])
def test_xl_term_equals_its_formula_on_both_paths(monkeypatch, forced, sampled):
    monkeypatch.setattr(posenc._torch, "force_device_path", forced)
    torch.manual_seed(0)
    model = LabModel(11, "xl", **TINY)
    part = model.encoding.layers[0]
    with torch.no_grad():
        part.u.normal_()
        part.term.bias.normal_()
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    ids = np.array([[0, 2, 3, 7, 8], [1, 4, 5, 6, 9]]) if sampled else np.arange(5)[None]
    pos = M.positions_of(ids, 2, 5, torch.device("cpu"))
    scores = torch.zeros(2, 4, 5, 5)
    got = model.encoding.add_scores(0, scores, q, k, pos).detach().numpy()
    span = pos.span
    table = posenc.xl_relative_table(span, span, 32, attn_type="uni", dtype="float64")
    want = _xl_by_hand(
        q.double().numpy(), table, part.project.weight.double().detach().numpy(),
        part.u.double().detach().numpy(), part.term.bias.double().detach().numpy(),
        k.double().numpy(), ids,
    )  # fmt: skip
    low = np.tril(np.ones((5, 5), bool))
    np.testing.assert_allclose(got[..., low], want[..., low], rtol=1e-4, atol=1e-5)


def test_sinusoid_is_added_at_the_positions_given():
    torch.manual_seed(0)
    model = LabModel(11, "sinusoid", **TINY)
    x = torch.zeros(1, 4, 32)
    ids = np.array([0, 5, 6, 40])
    pos = M.positions_of(ids, 1, 4, torch.device("cpu"))
    got = model.encoding.add_input(x, pos)[0].numpy()
    w = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    want = np.zeros((4, 32))
    want[:, 0::2], want[:, 1::2] = np.sin(ids[:, None] * w), np.cos(ids[:, None] * w)
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize("spec", lab.ENCODINGS)
def test_encoder_padding_changes_nothing(spec):
    """Right padding is masked and left out of the mean: the padded text's
    logits are the unpadded text's."""
    torch.manual_seed(0)
    model = LabModel(9, spec, kind="encoder", n_classes=3, pad_id=0, **TINY).eval()
    text = torch.tensor([[4, 5, 6, 7, 8]])
    padded = torch.tensor([[4, 5, 6, 7, 8, 0, 0, 0]])
    torch.testing.assert_close(model(padded), model(text), rtol=1e-5, atol=1e-6)
    first = LabModel(9, spec, kind="encoder", n_classes=3, pad_id=0, pooling="first", **TINY)
    assert first(padded).shape == (1, 3)


def test_model_refuses_bad_arguments_naming_them():
    with pytest.raises(ValueError, match="multiple of heads"):
        LabModel(10, "nope", dim=30, heads=4)
    with pytest.raises(ValueError, match="n_classes"):
        LabModel(10, "nope", kind="encoder")
    with pytest.raises(ValueError, match="kind"):
        LabModel(10, "nope", kind="classifier")
    model = LabModel(10, "nope", **TINY)
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="positions must have shape"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=">= 0"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.tensor([-1, 0, 1]))
    with pytest.raises(ValueError, match="training length"):
        LabModel(10, "rope:yarn:4", **TINY)


def test_learned_positions_past_the_table_and_copes_positions():
    model = LabModel(10, "learned", max_positions=8, **TINY)
    with pytest.raises(ValueError, match="max_positions >= 11"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.tensor([0, 5, 10]))
    cope = LabModel(10, "cope", train_length=9, **TINY)
    assert cope.encoding.layers[0].max_positions == 10  # the authors' block size + 1
    assert LabModel(10, "cope:max_positions=4", **TINY).encoding.layers[1].max_positions == 4


def test_blocks_start_alike_whatever_the_encoding():
    """For a seed, the blocks and the head are the same in every model: only
    the encoding differs."""
    models = []
    for spec in ("nope", "alibi", "xl", "rope"):
        torch.manual_seed(3)
        models.append(LabModel(10, spec, **TINY))
    for m in models[1:]:
        for (name, a), b in zip(models[0].blocks.named_parameters(), m.blocks.parameters()):
            assert torch.equal(a, b), name
        assert torch.equal(models[0].head.weight, m.head.weight)


# -- every encoding trains ------------------------------------------------------------------


@pytest.mark.parametrize("spec", VARIANTS)
def test_every_encoding_trains_and_every_parameter_gets_a_gradient(spec):
    result = run(spec, _copy(), seed=0, train_length=9, eval_lengths=[9, 18], config=FEW,
                 model_options=TINY)  # fmt: skip
    losses = np.array(result.losses)
    assert np.all(np.isfinite(losses)) and len(losses) == FEW.steps
    assert losses[-3:].mean() < losses[:3].mean() - 0.05, losses
    assert all(0.0 <= x <= 1.0 for x in result.values)
    torch.manual_seed(0)
    enc = lab.encoding(spec)
    model = LabModel(10, enc, max_positions=64, train_length=9, **TINY)
    tokens = torch.randint(0, 10, (3, 9))
    pos = None
    if enc.sampler is not None:
        pos = torch.from_numpy(posenc.randomized_position_ids(9, 64, batch=3, seed=0))
    model(tokens, pos).square().mean().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert p.grad.abs().sum() > 0, name
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == (["encoding.table.weight"] if spec.endswith("freeze") else [])


# -- determinism, resume, the device path ---------------------------------------------------


def test_a_seed_gives_the_same_numbers():
    a = run("rope", _copy(), seed=1, train_length=9, eval_lengths=[9], config=FEW,
            model_options=TINY)  # fmt: skip
    b = run("rope", _copy(), seed=1, train_length=9, eval_lengths=[9], config=FEW,
            model_options=TINY)  # fmt: skip
    c = run("rope", _copy(), seed=2, train_length=9, eval_lengths=[9], config=FEW,
            model_options=TINY)  # fmt: skip
    assert a.losses == b.losses and a.values == b.values
    assert a.losses != c.losses


@pytest.mark.parametrize("spec", ["t5+randomized", "xl"])
def test_a_resumed_run_ends_as_an_uninterrupted_one(tmp_path, spec):
    kwargs = dict(seed=0, train_length=9, eval_lengths=[9, 18], model_options=TINY)
    config = TrainConfig(steps=8, batch_size=8, lr=3e-3, eval_samples=16, checkpoint_every=2)
    whole = run(spec, _copy(), config=config, **kwargs)
    folder = str(tmp_path)
    part = run(spec, _copy(), config=config, checkpoint_dir=folder, stop_after=5, **kwargs)
    assert len(part.losses) == 5 and part.values == []
    resumed = run(spec, _copy(), config=config, checkpoint_dir=folder, **kwargs)
    assert resumed.resumed_from == 5
    assert resumed.losses == whole.losses and resumed.values == whole.values
    again = run(spec, _copy(), config=config, checkpoint_dir=folder, **kwargs)  # finished
    assert again.resumed_from == 8 and again.values == whole.values
    other = TrainConfig(steps=8, batch_size=8, lr=1e-3, eval_samples=16)
    with pytest.raises(ValueError, match="other settings"):
        run(spec, _copy(), config=other, checkpoint_dir=folder, **kwargs)


@pytest.mark.parametrize("spec", ["t5", "xl", "rope", "sinusoid", "alibi+randomized"])
def test_the_device_path_forced_on_the_cpu_gives_the_same_losses(monkeypatch, spec):
    kwargs = dict(seed=0, train_length=9, eval_lengths=[9], config=FEW, model_options=TINY)
    host = run(spec, _copy(), **kwargs)
    monkeypatch.setattr(posenc._torch, "force_device_path", True)
    forced = run(spec, _copy(), **kwargs)
    np.testing.assert_allclose(forced.losses, host.losses, rtol=1e-4)


def test_bfloat16_autocast_trains_near_float32():
    config = TrainConfig(steps=12, batch_size=8, lr=3e-3, eval_samples=16, autocast="bfloat16")
    kwargs = dict(seed=0, train_length=9, eval_lengths=[9], model_options=TINY)
    bf16 = run("alibi", _copy(), config=config, **kwargs)
    f32 = run("alibi", _copy(), config=FEW, **kwargs)
    assert np.all(np.isfinite(bf16.losses))
    np.testing.assert_allclose(bf16.losses[0], f32.losses[0], rtol=2e-2)


def test_train_config_refuses_bad_values():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="autocast"):
        TrainConfig(autocast="float16")
    with pytest.raises(ValueError, match="no cuda device|not a torch device"):
        device = "cuda" if not torch.cuda.is_available() else "x"
        run("nope", _copy(), train_length=9, eval_lengths=[9], config=TrainConfig(device=device))


def test_the_schedule_warms_up_then_decays_to_a_tenth():
    c = TrainConfig(steps=100, lr=1.0)
    assert c.warmup_steps == 10
    assert c.lr_at(0) == pytest.approx(0.1) and c.lr_at(9) == pytest.approx(1.0)
    assert c.lr_at(99) == pytest.approx(0.1)
    mid = 10 + 89 / 2
    assert c.lr_at(int(mid)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 44 / 89)))
    assert TrainConfig(steps=100, lr=1.0, schedule="constant").lr_at(99) == 1.0


# -- language modelling, classification ------------------------------------------------------


def test_perplexity_and_the_skip_attack_recomputed_from_the_checkpoint(tmp_path):
    problem = LanguageModelProblem(text_data(), 16)
    config = TrainConfig(steps=6, batch_size=4, lr=3e-3, eval_tokens=64)
    result = run(
        "sinusoid", problem, seed=0, train_length=16, eval_lengths=[16, 32], config=config,
        model_options=TINY, checkpoint_dir=str(tmp_path), skip=(1, 2),
    )  # fmt: skip
    state = torch.load(tmp_path / "sinusoid-seed0.pt", weights_only=True)
    model = LabModel(256, "sinusoid", max_positions=32, train_length=16, **TINY)
    model.load_state_dict(state["model"])
    model.eval()
    valid = problem.valid
    for n, got in zip((16, 32), result.values):
        windows = 64 // n
        x = torch.from_numpy(valid[: windows * n].reshape(windows, n))
        y = torch.from_numpy(valid[1 : windows * n + 1].reshape(windows, n))
        with torch.no_grad():
            nll = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        assert got == pytest.approx(math.exp(float(nll)), rel=1e-5)
    x = torch.from_numpy(valid[:64].reshape(4, 16))
    y = torch.from_numpy(valid[1:65].reshape(4, 16))
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(
            model(x, torch.arange(16) * 2).reshape(-1, 256), y.reshape(-1)
        )
    assert result.skip[2] == pytest.approx(math.exp(float(nll)), rel=1e-5)
    assert result.skip[1] == pytest.approx(result.values[0], rel=1e-12)


def test_compare_on_text_says_where_the_skip_attack_does_not_apply():
    result = lab.compare(
        ["nope", "rope"], "lm", text=text_data(), train_length=16, eval_lengths=[16, 32],
        seeds=1, config=TrainConfig(steps=3, batch_size=4, eval_tokens=64), skip=(1, 2),
    )  # fmt: skip
    assert result.metric == "perplexity" and result.skip["nope"] is None
    assert set(result.skip["rope"]) == {1, 2} and result.settings["skip"] == [1, 2]
    text = result.to_markdown()
    assert "Skip-position attack" in text and "| nope | n/a | n/a |" in text
    assert "nope takes no position ids" in text


def test_compare_on_text_without_the_skip_attack_shows_no_attack_table():
    result = lab.compare(
        ["nope", "rope"], "lm", text=text_data(), train_length=16, eval_lengths=[16, 32],
        seeds=1, config=TrainConfig(steps=2, batch_size=4, eval_tokens=64), skip=(),
    )  # fmt: skip
    assert result.skip is None and result.to_dict()["skip"] is None
    assert result.settings["skip"] == []
    text = result.to_markdown()
    assert "Skip-position" not in text and "n/a" not in text
    assert text.splitlines()[-1].startswith("| rope | ")


def test_classification_accuracy_and_the_published_column(monkeypatch):
    C = sys.modules["posenc.lab.compare"]  # the module (posenc.lab.compare is its function)

    # the paper's figures are percent; a table's initialisation names its column
    monkeypatch.setattr(C, "PUBLISHED", {"order": {"random": 61.5, "gpt2": 70.25}})
    data = classification_data()
    encodings = ["nope", "learned:random", "learned:sinusoid"]
    result = lab.compare(encodings, dataset=data, seeds=2,
                         config=TrainConfig(steps=4, batch_size=8), dim=16, heads=2)  # fmt: skip
    assert result.lengths == (12,) and result.task == "order"  # the data set's name
    assert result.settings["model"]["layers"] == 1
    assert result.published == {"nope": None, "learned:random": 0.615, "learned:sinusoid": None}
    text = result.to_markdown()
    assert "| encoding | accuracy | published |" in text
    cells = [line.rpartition("| ")[2] for line in text.splitlines()[4:7]]
    assert cells == ["— |", "0.615 |", "— |"]
    assert "Published: Wang & Chen 2020" in text
    for x in result.values["nope"][:, 0]:
        assert x * 32 == round(x * 32)  # accuracies of the 32 test texts
    # a model's table by its Hub name, under either spelling; no other model
    specs = [lab.encoding(f"learned:{n}") for n in ("gpt2", "openai-community/gpt2", "gpt2-medium")]
    found, _ = C._published("order", specs)
    assert list(found.values()) == [0.7025, 0.7025, None]
    problem = ClassificationProblem(data)
    assert problem.kind == "encoder" and problem.n_classes == 2


# -- compare: the table, the record, the plot ---------------------------------------------------


def test_compare_table_holds_the_mean_and_std_over_seeds(tmp_path):
    result = lab.compare(
        ["nope", "alibi+randomized"], copy_task(), train_length=9, eval_lengths=[9, 18],
        seeds=[0, 5], config=FEW, dim=16, heads=2,
    )  # fmt: skip
    assert result.labels == ("nope", "alibi+randomized") and result.seeds == (0, 5)
    for label, cells in result.table():
        values = result.values[label]
        assert values.shape == (2, 2)
        for j, cell in enumerate(cells):
            mean, std = values[:, j].mean(), values[:, j].std(ddof=1)
            assert cell == f"{mean:.3f} ± {std:.3f}"
    record = json.loads(json.dumps(result.to_dict()))
    assert record["settings"]["versions"]["torch"] == torch.__version__
    assert record["settings"]["versions"]["posenc"] == posenc.__version__
    assert record["settings"]["encodings"][1]["sampler"] == "randomized"
    assert record["settings"]["encodings"][1]["max_len"] is None  # the longest length, 18
    assert record["settings"]["train"]["steps"] == FEW.steps
    assert record["values"]["nope"] == result.values["nope"].tolist()
    fig = result.plot()
    assert [line.get_label() for line in fig.axes[0].get_lines()][:2] == list(result.labels)
    assert result.plot(tmp_path / "lab.png") == tmp_path / "lab.png"
    assert (tmp_path / "lab.png").stat().st_size > 0


def test_a_perplexity_cell_keeps_four_digits_and_its_deviation_the_same_decimals():
    values = {"a": np.array([[16.99, 8.40, 1234.2], [17.006, 8.48, 1236.4]])}
    result = lab.LabComparison(
        task="lm", metric="perplexity", labels=("a",), lengths=(8, 16, 32), seeds=(0, 1),
        train_length=8, values=values, losses={"a": np.zeros(2)},
    )  # fmt: skip
    # means 16.998, 8.44, 1235.3; deviations 0.0113, 0.0566, 1.556 (by hand)
    assert result.table() == [("a", ["17.00 ± 0.01", "8.440 ± 0.057", "1235 ± 2"])]
    one = lab.LabComparison(
        task="lm", metric="perplexity", labels=("a",), lengths=(8,), seeds=(0,),
        train_length=8, values={"a": np.array([[20.0]])}, losses={"a": np.zeros(1)},
    )  # fmt: skip
    assert one.table() == [("a", ["20.00"])]


def test_compare_refuses_bad_arguments():
    with pytest.raises(ValueError, match="nothing to train on"):
        lab.compare(["nope"], train_length=8)
    with pytest.raises(ValueError, match="given twice"):
        lab.compare(["nope", "nope"], copy_task(), train_length=9)
    with pytest.raises(ValueError, match="min_length"):
        lab.compare(["nope"], copy_task(), train_length=2)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        lab.compare(["nope"], copy_task(), train_length=9, seeds=[1, 1])
    with pytest.raises(ValueError, match="parallel"):
        lab.compare(["nope"], copy_task(), train_length=9, parallel="model")


# -- the command line ------------------------------------------------------------------------


def test_cli_lab_end_to_end_with_json(tmp_path, capsys):
    from posenc.__main__ import main

    out = tmp_path / "lab.json"
    code = main([
        "lab", "--task", "copy", "--encodings", "nope,rope,alibi", "--train-length", "9",
        "--eval-lengths", "9,18", "--seeds", "2", "--steps", "3", "--batch-size", "4",
        "--dim", "16", "--heads", "2", "--eval-samples", "8", "--json", str(out),
        "--no-progress",
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "| encoding | 9 | 18 |" in printed and "| rope |" in printed
    record = json.loads(out.read_text())
    assert record["labels"] == ["nope", "rope", "alibi"] and record["lengths"] == [9, 18]
    assert record["seeds"] == [0, 1] and record["settings"]["model"]["dim"] == 16


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--encodings", "rope:oops", "--train-length", "9"], "--encodings: encoding 'rope:oops'"),
        (["--encodings", "nope"], "needs --train-length"),
        (["--encodings", "nope", "--train-length", "9", "--steps", "0"], "--steps must be >= 1"),
        (["--encodings", "nope", "--train-length", "9", "--eval-lengths", "9,x"], "whole number"),
        (["--encodings", "nope", "--train-length", "9", "--device", "nowhere"], "--device"),
        (["--encodings", "nope", "--train-length", "9", "--text", "f.txt"], "--text is for"),
        (["--task", "copyy", "--encodings", "nope"], "--task copyy: not a task (lm, "),
    ],
)
def test_cli_lab_errors_are_one_line(argv, words, capsys):
    from posenc.__main__ import main

    task = ["--task", "copy"] if "--task" not in argv else []
    assert main(["lab", *task, *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("posenc lab: error: ") and words in err and err.count("\n") == 1


def test_import_posenc_lab_imports_no_torch():
    import subprocess

    code = "import posenc.lab, sys; assert 'torch' not in sys.modules; print(posenc.lab.ENCODINGS)"
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=os.path.dirname(os.path.dirname(posenc.__file__)),
    )


class _Terminal:
    """A stderr that says it is a terminal, keeping what is written."""

    def __init__(self, tty):
        self.tty, self.text = tty, []

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text.append(text)

    def flush(self):
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_progress_bars_are_drawn_on_a_terminal_only(monkeypatch, tty):
    stderr = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", stderr)
    config = TrainConfig(steps=3, batch_size=4, eval_samples=4)
    run("nope", _copy(), train_length=9, eval_lengths=[9], config=config, progress=True)
    drawn = "".join(stderr.text)
    if tty:
        assert "3/3" in drawn and "nope seed 0: loss" in drawn
    else:
        assert drawn == ""


def test_under_autocast_the_score_terms_are_float32(monkeypatch):
    torch.manual_seed(0)
    model = LabModel(10, "xl", **TINY)
    seen = []
    add = model.encoding.add_scores

    def spy(layer, scores, q, k, positions):
        seen.append((scores.dtype, q.dtype, k.dtype))
        out = add(layer, scores, q, k, positions)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(model.encoding, "add_scores", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randint(0, 10, (2, 6)))
    assert logits.dtype == torch.bfloat16  # the head ran under autocast
    assert seen == [(torch.float32,) * 3, torch.float32] * 2


def test_the_process_group_joined_is_left_at_exit(tmp_path):
    # a gloo group alive as the interpreter finalizes aborts the process
    # ("terminate called without an active exception"): init_distributed
    # registers _leave_group at exit, which destroys it once, and does
    # nothing for a group the caller already destroyed
    from posenc.lab import train

    dist = torch.distributed
    init = f"file://{tmp_path / 'rendezvous'}"
    dist.init_process_group(backend="gloo", init_method=init, rank=0, world_size=1)
    assert dist.is_initialized()
    train._leave_group(dist)
    assert not dist.is_initialized()
    train._leave_group(dist)  # already left: nothing to do
    assert not dist.is_initialized()
