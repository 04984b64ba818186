"""posenc.context and ``posenc context``: what a scaling method does to a
loaded RoPE model, measured.

The witnesses: the sliding-window perplexity and the loss by position
written out here by the Hugging Face recipe on the same windows of a tiny
random Llama; transformers' own eager attention weights reduced by hand;
passkey scoring on stand-in models that echo the key, or miss it; the
command line on a model folder, and on the loopback Hub in a process of
its own (transformers reads its Hub endpoint once, when imported).

A method other than "none" is prepared by ``posenc.hf.prepare(model,
scaling=...)``, applied and removed; these tests reach it through the two
functions that call it, ``posenc.context._methods.prepared`` and
``with_method``: their own contract is tested with ``hf.prepare`` and
``hf.unpatch`` recorded, and the measurements of a second method with a
stand-in for them that runs a twin of the model whose config carries that
scaling (transformers' own linear scaling).
"""

import contextlib
import copy
import json
import math
import os
import re
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
import tiny_models
from hub_server import HubServer, Repo
from optional import require

torch = require("torch")
transformers = require("transformers")
tokenizers = require("tokenizers")

import posenc.hf  # noqa: E402
from posenc import context  # noqa: E402
from posenc.__main__ import main  # noqa: E402
from posenc.context import _load, _methods  # noqa: E402
from posenc.context._memory import parameters_of  # noqa: E402
from posenc.context.passkey import PasskeyPrompt, answer_key  # noqa: E402
from posenc.context.perplexity import windows  # noqa: E402

PREFIX = "posenc context: error: "
WORDS = [f"w{i}" for i in range(37)]


# ---------------------------------------------------------------- models and texts


@pytest.fixture(scope="module")
def llama():
    """A tiny random Llama in float64 (so that float rounding is float64's)."""
    return tiny_models.llama(max_position_embeddings=64).double()


@pytest.fixture(scope="module")
def ids():
    return np.random.default_rng(0).integers(0, 40, 203)


def _hand_evaluation(model, ids, length, stride):
    """Hugging Face's sliding-window recipe written out: each window's
    labels are its last ``end - prev_end`` tokens (the rest -100), each
    token's loss the float64 log-softmax of the model's logits.  Returns
    (perplexity, tokens scored, {window position: [losses]})."""
    nll, scored, by_position = 0.0, 0, {}
    prev_end = 0
    for begin in range(0, len(ids), stride):
        end = min(begin + length, len(ids))
        window = torch.tensor(ids[begin:end])[None]
        labels = window.clone()
        labels[:, : -(end - prev_end)] = -100
        with torch.no_grad():
            logits = model(window).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        for p in range(1, end - begin):
            loss = -float(logp[p - 1, window[0, p]])
            by_position.setdefault(p, []).append(loss)
            if labels[0, p] != -100:
                nll += loss
                scored += 1
        prev_end = end
        if end == len(ids):
            break
    return math.exp(nll / scored), scored, by_position


def test_windows_are_the_recipes():
    # 10 tokens, windows of 4 every 2: each scores what the one before did not
    assert windows(10, 4, 2) == [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    # side by side: a window's first token has nothing before it, and is not scored
    assert windows(10, 4, 4) == [(0, 4, 1), (4, 8, 5), (8, 10, 9)]  # the last one short
    assert windows(4, 4, 1) == [(0, 4, 1)]


@pytest.mark.parametrize(("lengths", "stride"), [((32, 64), None), ((48, 64), 16)])
def test_perplexity_equals_the_hand_written_evaluation(llama, ids, lengths, stride):
    r = context.perplexity_by_length(llama, ids, lengths, stride=stride)
    for k, n in enumerate(lengths):
        ppl, scored, by_position = _hand_evaluation(llama, ids, n, stride or n)
        assert r.perplexity[k] == pytest.approx(ppl, rel=1e-12)
        assert r.scored[k] == scored
        assert scored == len(ids) - (r.windows[k] if stride is None else 1)
        mean = r.position_loss(n)
        assert np.isnan(mean[0])
        for p, losses in by_position.items():
            assert mean[p] == pytest.approx(np.mean(losses), rel=1e-12)
            assert r.position_count[k][p] == len(losses)
        edges, binned, count = r.loss_by_position(n, bins=5)
        for b in range(len(binned)):
            losses = [x for p in range(edges[b], edges[b + 1]) for x in by_position[p]]
            assert binned[b] == pytest.approx(np.mean(losses), rel=1e-12)
            assert count[b] == len(losses)


def test_perplexity_leaves_the_model_as_it_was(llama, ids):
    llama.train()
    try:
        before = {k: v.clone() for k, v in llama.state_dict().items()}
        context.perplexity_by_length(llama, ids, 32)
        assert llama.training and all(m.training for m in llama.modules())
        assert all(torch.equal(before[k], v) for k, v in llama.state_dict().items())
    finally:
        llama.eval()
    r = context.perplexity_by_length(llama, torch.tensor(ids), 32)  # a tensor of ids too
    assert r.perplexity[0] == pytest.approx(_hand_evaluation(llama, ids, 32, 32)[0], rel=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_perplexity_of_a_float32_or_bfloat16_model_is_that_of_its_logits(dtype):
    model = tiny_models.llama(max_position_embeddings=64).to(getattr(torch, dtype))
    ids = np.random.default_rng(1).integers(0, 40, 100)
    r = context.perplexity_by_length(model, ids, 50)  # the loss of bfloat16 logits in float32
    assert r.perplexity[0] == pytest.approx(_hand_evaluation(model, ids, 50, 50)[0], rel=1e-6)


def test_perplexity_result_table_json_and_plot(llama, ids, tmp_path):
    require("matplotlib")
    r = context.perplexity_by_length(llama, ids, [32, 64], bins=4)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["lengths"] == [32, 64] and d["perplexity"] == pytest.approx(list(r.perplexity))
    assert d["loss_by_position"]["32"]["edges"] == [1, 9, 16, 24, 32]
    assert sum(d["loss_by_position"]["64"]["count"]) == int(r.position_count[1].sum())
    table = r.to_markdown().splitlines()
    assert table[2].startswith("| length | stride | perplexity |") and len(table) == 6
    assert r.plot(tmp_path / "p.png") == tmp_path / "p.png" and (tmp_path / "p.png").stat().st_size
    assert "32: " in repr(r)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"lengths": [300]}, ValueError, "fewer than the longest length 300"),
        ({"lengths": [32, 32]}, ValueError, "distinct"),
        ({"lengths": [1]}, ValueError, "lengths"),
        ({"lengths": "32"}, TypeError, "lengths"),
        ({"lengths": [32, 64], "stride": 40}, ValueError, "stride must be at most"),
        ({"lengths": [32], "stride": 0}, ValueError, "stride"),
        ({"lengths": [32], "bins": 0}, ValueError, "bins"),
        ({"lengths": [32], "tokens": "some text"}, TypeError, "not text"),
        ({"lengths": [32], "tokens": [[1, 2], [3, 4]]}, TypeError, "1-D"),
        ({"lengths": [32], "tokens": [0.5] * 40}, TypeError, "integer"),
        ({"lengths": [3], "tokens": [1, 2, 40]}, ValueError, "token id 40 is outside"),
        ({"lengths": [3], "tokens": [1, -2, 3]}, ValueError, "token id -2 is outside"),
    ],
)
def test_perplexity_refuses_bad_input_naming_it(llama, ids, kwargs, error, words):
    kwargs = {"tokens": ids, **kwargs}
    with pytest.raises(error, match=words):
        context.perplexity_by_length(llama, **kwargs)


# ---------------------------------------------------------------- the one function that patches


def test_none_is_the_model_as_loaded_and_patches_nothing(llama, monkeypatch):
    from posenc import hf

    def refuse(*args, **kwargs):
        raise AssertionError("none must not patch")

    for name in ("prepare", "patch", "unpatch"):
        monkeypatch.setattr(hf, name, refuse)
    ready = _methods.prepared(llama, "none")
    assert ready is None
    with _methods.with_method(llama, ready) as run:
        assert run is llama


@pytest.mark.parametrize("method", ["yarn:4", {"rope_type": "linear", "factor": 4.0}])
def test_a_method_is_prepared_once_then_applied_and_unpatched_however_the_block_ends(
    llama, monkeypatch, method
):
    from posenc import hf

    calls = []

    class Ready:
        def apply(self):
            calls.append(("apply", self))

    ready = Ready()
    monkeypatch.setattr(hf, "prepare", lambda m, **kw: calls.append(("prepare", m, kw)) or ready)
    monkeypatch.setattr(hf, "unpatch", lambda m: calls.append(("unpatch", m)))
    assert _methods.prepared(llama, method) is ready
    assert calls == [("prepare", llama, {"scaling": method})]
    calls.clear()
    with _methods.with_method(llama, ready) as run:
        assert run is llama
    assert calls == [("apply", ready), ("unpatch", llama)]
    calls.clear()
    with pytest.raises(RuntimeError), _methods.with_method(llama, ready):
        raise RuntimeError("a measurement failed")
    assert calls == [("apply", ready), ("unpatch", llama)]


def _twin_with_scaling(model, method):
    """A second instance of `model` (same weights) whose config carries the
    scaling of ``"linear:F"``: transformers' own linear interpolation."""
    kind, factor = method.split(":")
    assert kind == "linear"
    config = copy.deepcopy(model.config)
    params = dict(config.rope_parameters)
    params.update(rope_type="linear", factor=float(factor))
    config.rope_parameters = params
    twin = type(model)(config).to(dtype=next(model.parameters()).dtype).eval()
    twin.load_state_dict(model.state_dict())
    return twin


@pytest.fixture
def stand_in(monkeypatch):
    """``prepared`` and ``with_method`` stood in for: ``"none"`` the model
    itself, ``"linear:F"`` a twin whose config scales linearly, anything else
    refused when prepared; every call recorded, ``("check", method)`` and
    ``("run", method)``."""
    calls = []

    def prepared(model, method):
        calls.append(("check", method))
        if method != "none" and not (isinstance(method, str) and method.startswith("linear:")):
            raise ValueError(f"scaling: unknown method {method!r}")
        return method

    @contextlib.contextmanager
    def with_method(model, method):
        calls.append(("run", method))
        yield model if method == "none" else _twin_with_scaling(model, method)

    monkeypatch.setattr(_methods, "prepared", prepared)
    monkeypatch.setattr(_methods, "with_method", with_method)
    return calls


def test_compare_runs_each_method_in_turn_and_equals_each_ones_evaluation(llama, ids, stand_in):
    r = context.compare(llama, ids, methods=["none", "linear:4"], lengths=[32, 64], stride=16)
    # each method built and checked once before anything runs, then run once
    assert stand_in == [
        ("check", "none"),
        ("check", "linear:4"),
        ("run", "none"),
        ("run", "linear:4"),
    ]
    assert r.methods == ("none", "linear:4") and r.lengths == (32, 64)
    witness = {"none": llama, "linear:4": _twin_with_scaling(llama, "linear:4")}
    for label, model in witness.items():
        for k, n in enumerate((32, 64)):
            ppl = _hand_evaluation(model, ids, n, 16)[0]
            assert r.perplexity[label].perplexity[k] == pytest.approx(ppl, rel=1e-12)
    assert not np.allclose(r.perplexity["none"].perplexity, r.perplexity["linear:4"].perplexity)
    lines = r.to_markdown().splitlines()
    assert lines[2] == "| method | 32 | 64 |"
    assert lines[4].startswith("| none | ") and lines[5].startswith("| linear:4 | ")
    assert r.passkey is None and r.max_position_embeddings == 64


def test_compare_patches_each_method_as_transformers_scales_it(llama, ids):
    # the real posenc.hf.patch: each method's perplexity is that of the same
    # weights in a model whose config carries the method (transformers' angles
    # are float32's: within 1e-5)
    r = context.compare(llama, ids, methods=["none", "linear:4"], lengths=[32, 64], stride=16)
    witness = {"none": llama, "linear:4": _twin_with_scaling(llama, "linear:4")}
    for label, model in witness.items():
        for k, n in enumerate((32, 64)):
            ppl = _hand_evaluation(model, ids, n, 16)[0]
            assert r.perplexity[label].perplexity[k] == pytest.approx(ppl, rel=1e-5)
    assert not np.allclose(r.perplexity["none"].perplexity, r.perplexity["linear:4"].perplexity)
    assert not posenc.hf.patched_parts(llama)  # unpatched after


def test_a_method_that_cannot_apply_is_refused_before_any_forward_pass(llama, ids, stand_in):
    passes = []
    hook = llama.register_forward_hook(lambda *a: passes.append(1))
    try:
        with pytest.raises(ValueError, match="unknown method 'bogus:2'"):
            context.compare(llama, ids, methods=["none", "linear:2", "bogus:2"], lengths=32)
    finally:
        hook.remove()
    assert passes == []
    assert stand_in == [("check", "none"), ("check", "linear:2"), ("check", "bogus:2")]


@pytest.mark.parametrize(
    ("methods", "error", "words"),
    [
        ([], ValueError, "at least one method"),
        (["none", "none"], ValueError, "given twice"),
        ([3], TypeError, "must be a string"),
        (42, TypeError, "methods must be"),
    ],
)
def test_compare_refuses_bad_methods(llama, ids, methods, error, words):
    with pytest.raises(error, match=words):
        context.compare(llama, ids, methods=methods, lengths=32)


def test_compare_needs_something_to_measure(llama, ids):
    with pytest.raises(ValueError, match="nothing to measure"):
        context.compare(llama, lengths=32)
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        context.compare(llama, ids, lengths=32, passkey=True)


def test_methods_are_labelled_as_given():
    from posenc.context._common import method_label, methods_of

    assert method_label("yarn:4") == "yarn:4"
    assert method_label({"rope_type": "linear", "factor": 4.0}) == "linear:factor=4.0"
    config = transformers.LlamaConfig(rope_parameters={"rope_type": "yarn", "factor": 2.0})
    assert method_label(config) == "LlamaConfig(yarn)"
    assert list(methods_of({"mine": "yarn:4", "base": "none"})) == ["mine", "base"]
    assert list(methods_of({"rope_type": "linear", "factor": 2.0})) == ["linear:factor=2.0"]


# ---------------------------------------------------------------- passkey


def _passkey_tokenizer():
    """A WordPiece tokenizer of the default prompt's words, the digits, and
    ``##`` digits, so that a key is its digits and decodes back whole."""
    p = PasskeyPrompt()
    words = " ".join((p.task, p.filler, p.needle, p.question)).replace("{key}", " ")
    vocab = ["[UNK]", "[BOS]", "[EOS]"] + sorted(
        set(words.replace(".", " . ").replace("?", " ? ").split())
    )
    vocab += [str(d) for d in range(10)] + [f"##{d}" for d in range(10)]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


@pytest.fixture(scope="module")
def passkey_tokenizer():
    return _passkey_tokenizer()


class _Echo(torch.nn.Module):
    """A stand-in language model: it reads the key in its prompt and
    answers it token by token (`wrong`: with its last digit changed), as a
    model's forward answers greedy decoding, the cache its own counter."""

    def __init__(self, tokenizer, wrong=False):
        super().__init__()
        self.tokenizer, self.wrong = tokenizer, wrong
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.prompts = []

    def forward(self, input_ids, past_key_values=None, use_cache=None, **kwargs):
        vocab = len(self.tokenizer)
        if past_key_values is None:
            text = self.tokenizer.decode(input_ids[0])
            self.prompts.append(input_ids[0].tolist())
            key = re.search(r"The pass key is (\d+)", text).group(1)
            if self.wrong:
                key = key[:-1] + str((int(key[-1]) + 1) % 10)
            answer = self.tokenizer(" " + key + " .", add_special_tokens=False)["input_ids"]
            past_key_values = [answer, 0]
        answer, step = past_key_values
        logits = torch.zeros(1, input_ids.shape[1], vocab)
        logits[0, -1, answer[min(step, len(answer) - 1)]] = 1.0
        return types.SimpleNamespace(logits=logits, past_key_values=[answer, step + 1])


def test_a_model_that_echoes_the_key_scores_all_and_one_that_misses_none(passkey_tokenizer):
    tok = passkey_tokenizer
    echo, miss = _Echo(tok), _Echo(tok, wrong=True)
    kwargs = dict(lengths=[80, 160], depths=[0.0, 0.5, 1.0], trials=3, seed=7)
    right = context.passkey_retrieval(echo, tok, **kwargs)
    wrong = context.passkey_retrieval(miss, tok, **kwargs)
    assert right.accuracy.shape == (3, 2) and np.all(right.accuracy == 1.0)
    assert np.all(wrong.accuracy == 0.0) and right.by_length().tolist() == [1.0, 1.0]
    # the same prompts and keys for both (the keys' seed), each within its length
    assert np.array_equal(right.keys, wrong.keys) and echo.prompts == miss.prompts
    assert np.all((right.keys >= 1) & (right.keys <= 50000))
    keys = np.random.default_rng([7, 160, 500000]).integers(1, 50001, size=3)  # depth 0.5
    assert right.keys[1, 1].tolist() == keys.tolist()
    assert np.all(right.prompt_tokens <= np.array([80, 160])[None, :, None])
    assert np.all(right.prompt_tokens > np.array([80, 160])[None, :, None] - 40)
    assert [answer_key(a) for a in right.answers.ravel()] == right.keys.ravel().tolist()
    # depth 0: the key right after the task; depth 1: right before the question
    first, last = echo.prompts[9], echo.prompts[15]  # length 160 (4 fillers), depths 0 and 1
    text_first, text_last = tok.decode(first), tok.decode(last)
    assert text_first.index("pass key is") < text_first.index("grass")
    assert text_last.rindex("grass") < text_last.index("The pass key is")
    table = right.to_markdown().splitlines()
    assert table[2] == "| depth | 80 | 160 |" and table[-1] == "| all | 100% | 100% |"
    d = json.loads(json.dumps(right.to_dict()))
    assert d["keys"] == right.keys.tolist() and d["prompt"]["needle"] == PasskeyPrompt().needle


def test_the_prompt_is_landmark_attentions_and_overridable():
    p = PasskeyPrompt()
    assert p.text(123, 2, 1) == "\n".join(
        [
            "There is an important info hidden inside a lot of irrelevant text. Find it and "
            "memorize them. I will quiz you about the important information there.",
            "The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
            "back again. The grass is green. The sky is blue. The sun is yellow. Here we go. "
            "There and back again.",
            "The pass key is 123. Remember it. 123 is the pass key.",
            "The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
            "back again.",
            "What is the pass key? The pass key is",
        ]
    )
    mine = PasskeyPrompt(filler="la la.", needle="key={key}", keys=(10, 12))
    assert mine.text(11, 1, 0).splitlines()[1:3] == ["la la.", "key=11"]
    with pytest.raises(ValueError, match="field"):
        PasskeyPrompt(needle="no key here")
    with pytest.raises(ValueError, match="only field"):
        PasskeyPrompt(needle="{key} {other}")
    with pytest.raises(ValueError, match="keys"):
        PasskeyPrompt(keys=(5, 1))


def test_the_answer_is_the_first_number_of_the_continuation():
    assert answer_key(" 12345. Remember") == 12345
    assert answer_key("the key 7 and 8") == 7
    assert answer_key("no digits") is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"lengths": [20]}, "prompt without filler takes"),
        ({"lengths": [80], "depths": [1.5]}, r"depths must be in \[0, 1\]"),
        ({"lengths": [80], "depths": []}, "at least one depth"),
        ({"lengths": [80], "trials": 0}, "trials"),
        ({"lengths": [80], "max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_passkey_refuses_bad_input(passkey_tokenizer, kwargs, words):
    with pytest.raises(ValueError, match=words):
        context.passkey_retrieval(_Echo(passkey_tokenizer), passkey_tokenizer, **kwargs)


def test_passkey_on_a_real_model_is_its_greedy_decoding(passkey_tokenizer):
    """The continuation read is transformers' own greedy generation."""
    tok = passkey_tokenizer
    model = tiny_models.llama(vocab_size=len(tok), max_position_embeddings=128)
    r = context.passkey_retrieval(model, tok, 100, depths=[0.5], trials=2, max_new_tokens=4)
    prompt = PasskeyPrompt()
    for t in range(2):
        key = int(r.keys[0, 0, t])
        ids = tok(prompt.text(key, *_fill(tok, prompt, 100, 0.5)))["input_ids"]
        out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert r.answers[0, 0, t] == tok.decode(out[0, len(ids) :], skip_special_tokens=True)
        assert r.prompt_tokens[0, 0, t] == len(ids)


def _fill(tok, prompt, length, depth):
    """``(before, after)``: the most repetitions of the filler that keep the
    prompt with the longest key within `length` tokens, tried one by one."""
    best = None
    for n in range(200):
        before = int(round(depth * n))
        longest = tok(prompt.text(prompt.keys[1], before, n - before))["input_ids"]
        if len(longest) <= length:
            best = (before, n - before)
    return best


def test_compare_with_passkey_gives_one_table_and_a_heatmap_per_method(passkey_tokenizer, tmp_path):
    require("matplotlib")
    tok = passkey_tokenizer
    echo = _Echo(tok)
    r = context.compare(
        echo, methods=["none"], lengths=[80, 120], tokenizer=tok, passkey=True, trials=2
    )
    assert r.passkey["none"].accuracy.shape == (5, 2) and r.perplexity is None
    assert r.to_markdown().splitlines()[4] == "| none | 100% | 100% |"
    fig = r.plot()
    assert len(fig.axes[0].images) == 1  # the heatmap (and its colorbar)


def test_compare_plot_has_both_rows(llama, ids, tmp_path, stand_in):
    require("matplotlib")
    r = context.compare(llama, ids, methods=["none", "linear:2"], lengths=[32, 64])
    fig = r.plot()
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines if not line.get_label().startswith("_")] == [
        "none",
        "linear:2",
    ]
    assert r.plot(tmp_path / "c.svg") == tmp_path / "c.svg"
    with pytest.raises(ValueError, match="cannot write .nope"):
        r.plot(tmp_path / "c.nope")


# ---------------------------------------------------------------- attention by distance


def test_attention_by_distance_equals_transformers_weights_reduced_by_hand(llama, ids):
    text = ids[:40]
    before = llama.config._attn_implementation
    r = context.attention_by_distance(llama, text)
    assert llama.config._attn_implementation == before  # set back
    eager = copy.deepcopy(llama)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(torch.tensor(text)[None], output_attentions=True)
    n = len(text)
    assert r.weight.shape == (1, 2, 4, n) and r.layers == (
        "model.layers.0.self_attn",
        "model.layers.1.self_attn",
    )
    for layer, att in enumerate(out.attentions):
        w = att[0].double().numpy()
        for h in range(4):
            for d in (0, 1, 7, n - 1):
                expected = np.mean([w[h, i, i - d] for i in range(d, n)])
                assert r.weight[0, layer, h, d] == pytest.approx(expected, rel=1e-12)
            for i in (0, 5, n - 1):
                row = w[h, i, : i + 1]
                expected = -np.sum(row * np.log(row))
                assert r.entropy[0, layer, h, i] == pytest.approx(expected, rel=1e-10, abs=1e-14)
    assert np.all(r.count == np.arange(n, 0, -1))
    # the mean distance attended: sum over queries of sum_j w_ij (i - j), over n queries
    w = out.attentions[0][0, 0].double().numpy()
    i, j = np.tril_indices(n)
    assert r.mean_distance()[0, 0, 0] == pytest.approx(np.sum(w[i, j] * (i - j)) / n, rel=1e-12)


def test_attention_by_distance_of_two_methods_and_several_texts(llama, ids, stand_in, tmp_path):
    require("matplotlib")
    texts = [ids[:20], ids[20:50]]
    r = context.attention_by_distance(llama, texts, methods=["none", "linear:8"])
    assert r.methods == ("none", "linear:8") and r.n_tokens == (20, 30)
    assert r.count[0] == 50 and r.count[25] == 5
    alone = context.attention_by_distance(llama, texts[1])
    np.testing.assert_allclose(r.weight[0, :, :, 20:], alone.weight[0, :, :, 20:], rtol=1e-12)
    assert not np.allclose(r.weight[0], r.weight[1])
    assert r.to_markdown().splitlines()[2].startswith("| layer | none: entropy |")
    assert json.loads(json.dumps(r.to_dict()))["n_tokens"] == [20, 30]
    r.plot(tmp_path / "a.png")


def test_attention_by_distance_refuses_a_model_without_self_attn(passkey_tokenizer):
    with pytest.raises(ValueError, match="no attention module named self_attn"):
        context.attention_by_distance(_Echo(passkey_tokenizer), [1, 2, 3])


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("tied", [False, True])
def test_the_parameters_estimated_from_the_config_are_the_models(tied):
    model = tiny_models.llama(tie_word_embeddings=tied)
    assert parameters_of(model.config) == sum(p.numel() for p in model.parameters())
    assert _load.parameter_count(model.config) == sum(p.numel() for p in model.parameters())


def test_the_memory_estimate_by_part():
    config = tiny_models.llama().config  # 2 layers, 2 kv heads of 8, hidden 32, ffn 64, vocab 40
    e = context.estimate_memory(config, 1000, dtype="bfloat16", parameters=123)
    assert e.weights == 123 * 2
    assert e.kv_cache == 2 * 2 * 2 * 8 * (1000 + 10) * 2
    assert e.logits == 1000 * 40 * (2 + 4)
    assert e.activations == 1000 * (4 * 32 + 3 * 64) * 2
    assert e.total == e.weights + e.kv_cache + e.logits + e.activations
    heads = config.num_attention_heads  # eager: scores and weights in bfloat16, float32, float64
    eager = context.estimate_memory(config, 1000, dtype="bfloat16", parameters=123, eager=True)
    assert eager.activations == e.activations + heads * 1000 * 1000 * (2 + 2 + 4 + 8)
    assert e.describe().startswith("about ") and "KV cache" in e.describe()
    free = context.free_memory("cpu")
    assert free is None or free > 0
    assert context.free_memory("meta") is None
    with pytest.raises(ValueError, match="dtype"):
        context.estimate_memory(config, 10, dtype="int8")


# ---------------------------------------------------------------- the command line


def _word_tokenizer():
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def _folder_files(folder):
    return {name: (folder / name).read_bytes() for name in os.listdir(folder)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama saved with a word-level tokenizer, a text of its words,
    a GPT-2 and a Llama without tokenizer: ``(root, model)``."""
    root = tmp_path_factory.mktemp("context")
    model = tiny_models.llama(max_position_embeddings=64)
    model.save_pretrained(root / "llama")
    _word_tokenizer().save_pretrained(root / "llama")
    model.save_pretrained(root / "no-tokenizer")
    tiny_models.gpt2().save_pretrained(root / "gpt2")
    _word_tokenizer().save_pretrained(root / "gpt2")
    rng = np.random.default_rng(3)
    (root / "text.txt").write_text(" ".join(rng.choice(WORDS, 300)))
    return root, model


def test_cli_of_a_model_folder_equals_the_hand_written_evaluation(saved, capsys, tmp_path):
    root, model = saved
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    argv = ["context", str(root / "llama"), "--lengths", "32,64", "--text", str(root / "text.txt")]
    assert main([*argv, "--stride", "16", "--json", str(js), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| method | 32 | 64 |" in out and "| none | " in out
    data = json.loads(js.read_text())
    ids = _word_tokenizer()((root / "text.txt").read_text())["input_ids"]
    for k, n in enumerate((32, 64)):
        ppl = _hand_evaluation(model, ids, n, 16)[0]
        assert data["perplexity"]["none"]["perplexity"][k] == pytest.approx(ppl, rel=1e-6)
    run = data["run"]
    assert run["model"] == str(root / "llama") and run["lengths"] == [32, 64]
    assert run["methods"] == ["none"] and run["stride"] == 16 and run["tokens"] == len(ids)
    assert len(run["text"]["sha256"]) == 64 and run["dtype"] == "float32"
    require("matplotlib")
    assert main([*argv, "--plot", str(png), "--tokens", "100"]) == 0
    assert png.stat().st_size > 0 and "100 tokens of text" in capsys.readouterr().out


def test_cli_attention_by_distance_is_the_functions_on_the_texts_first_tokens(
    saved, capsys, tmp_path
):
    root, model = saved
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    argv = ["context", str(root / "llama"), "--lengths", "32", "--text", str(root / "text.txt"),
            "--methods", "none,linear:4", "--attention", "24", "--json", str(js)]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what linear:4 inferred
        assert main(argv) == 0
        out = capsys.readouterr().out
        ids = _word_tokenizer()((root / "text.txt").read_text())["input_ids"]
        want = context.attention_by_distance(model, ids[:24], methods=["none", "linear:4"])
    assert want.to_markdown() in out
    data = json.loads(js.read_text())
    assert data["run"]["attention_tokens"] == 24
    got = data["attention"]
    assert got["n_tokens"] == [24] and got["methods"] == ["none", "linear:4"]
    np.testing.assert_allclose(got["weight"], want.to_dict()["weight"], rtol=1e-12)
    assert not np.allclose(np.asarray(got["weight"])[0], np.asarray(got["weight"])[1])
    require("matplotlib")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*argv[:-2], "--plot", str(png)]) == 0
    assert (tmp_path / "out-attention.png").stat().st_size > 0
    assert f"attention plot written to {tmp_path / 'out-attention.png'}" in capsys.readouterr().out


def test_cli_passkey_and_a_dataset_through_the_datasets_library(saved, capsys, monkeypatch):
    root, _ = saved
    text = (root / "text.txt").read_text().split()
    asked = []

    def load_dataset(name, config, split, streaming):
        asked.append((name, config, split, streaming))
        return [{"text": " ".join(text[:150])}, {"text": ""}, {"text": " ".join(text[150:])}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    argv = ["context", str(root / "llama"), "--lengths", "64", "--dataset", "org/set:cfg:valid"]
    assert main(argv) == 0
    via_dataset = capsys.readouterr().out
    assert asked == [("org/set", "cfg", "valid", True)]
    joined = root / "joined.txt"
    joined.write_text(" ".join(text[:150]) + "\n\n" + " ".join(text[150:]))
    assert main(["context", str(root / "llama"), "--lengths", "64", "--text", str(joined)]) == 0
    assert via_dataset.splitlines()[4] == capsys.readouterr().out.splitlines()[4]
    assert main([*argv[:4], "--dataset", "org/set", "--column", "body"]) == 1
    assert "row 0 has no column 'body'" in capsys.readouterr().err
    assert asked[-1] == ("org/set", None, "test", True)


def test_cli_without_datasets_names_the_extra(saved, capsys, monkeypatch):
    root, _ = saved
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert main(["context", str(root / "llama"), "--lengths", "32", "--dataset", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(PREFIX) and 'pip install "posenc[context]"' in err


def _one_line_error(capsys, argv, *words):
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(PREFIX), captured.err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


def test_cli_errors_are_one_line(saved, capsys, tmp_path):
    root, _ = saved
    llama, text = str(root / "llama"), str(root / "text.txt")
    base = ["context", llama, "--text", text]
    _one_line_error(capsys, ["context", str(root / "gpt2"), "--lengths", "32", "--text", text],
                    "(gpt2) has no rotary module", "apply to rotary (RoPE) models")  # fmt: skip
    _one_line_error(capsys, ["context", str(root / "no-tokenizer"), "--lengths", "32", "--text",
                             text], "has no tokenizer")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "100000000"], "--lengths 100000000 will not fit",
                    "KV cache", "free")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "1000"], "fewer than the longest length 1000")
    _one_line_error(capsys, ["context", llama, "--lengths", "32"], "nothing to measure")
    _one_line_error(capsys, [*base, "--lengths", "32,x"], "'x' is not a whole number")
    _one_line_error(capsys, [*base, "--lengths", "1"], "below 2")
    _one_line_error(capsys, [*base, "--lengths", "32,64", "--stride", "40"], "--stride")
    _one_line_error(capsys, [*base, "--lengths", "64", "--tokens", "50"], "--tokens 50")
    _one_line_error(capsys, [*base, "--lengths", "32", "--attention", "1"], "--attention must be")
    _one_line_error(capsys, ["context", llama, "--lengths", "32", "--passkey", "--attention", "8"],
                    "--attention reads the text")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "32", "--attention", "5000"],
                    "fewer than --attention 5000")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "32", "--attention", "10000000"],
                    "--attention 10000000 will not fit", "fewer tokens")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "32", "--methods", ","], "--methods")
    _one_line_error(capsys, [*base, "--lengths", "32", "--plot", str(tmp_path / "a.nope")],
                    "cannot write .nope")  # fmt: skip
    _one_line_error(capsys, [*base, "--lengths", "32", "--passkey", "--depths", "2"], "[0, 1]")
    _one_line_error(capsys, [*base, "--lengths", "32", "--device", "gpu0"], "not a torch device")
    if not torch.cuda.is_available():
        _one_line_error(capsys, [*base, "--lengths", "32", "--device", "cuda"], "no cuda device")
    _one_line_error(capsys, ["context", llama, "--lengths", "20", "--passkey"],
                    "prompt without filler takes")  # fmt: skip
    _one_line_error(capsys, ["context", text, "--lengths", "32", "--passkey"], "a file; MODEL")
    _one_line_error(capsys, ["context", str(tmp_path / "nowhere") + "/x@", "--lengths", "32",
                             "--passkey"], "not a Hub name")  # fmt: skip


def test_cli_a_length_above_the_free_memory_is_refused_before_loading(saved, capsys, monkeypatch):
    root, _ = saved
    loads = []
    monkeypatch.setattr(context, "free_memory", lambda device: 1000)
    monkeypatch.setattr(_load, "load_model", lambda *a: loads.append(a))
    _one_line_error(capsys, ["context", str(root / "llama"), "--lengths", "32", "--passkey"],
                    "will not fit in memory", "and cpu has 0.0 MiB free")  # fmt: skip
    assert loads == []


def test_cli_no_network_with_nothing_cached_is_one_line(capsys, monkeypatch, tmp_path):
    require("huggingface_hub")
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _one_line_error(capsys, ["context", "posenc-tests/no-such-model", "--lengths", "32",
                             "--passkey"], "the Hub cannot be reached",
                    "Hugging Face cache holds no copy")  # fmt: skip


def test_cli_of_a_hub_model_through_the_loopback_hub(saved, tmp_path):
    """The whole path of a Hub name: transformers' from_pretrained against
    the loopback Hub (HF_ENDPOINT read when the process imports it)."""
    require("huggingface_hub")
    root, model = saved
    repo = Repo(_folder_files(root / "llama"))
    server = HubServer({"org/tiny-llama": repo}).start()
    js = tmp_path / "hub.json"
    env = dict(
        os.environ,
        HF_ENDPOINT=server.url,
        HF_HUB_CACHE=str(tmp_path / "cache"),
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p),
    )
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    argv = ["context", "org/tiny-llama", "--lengths", "32,64", "--text", str(root / "text.txt")]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "posenc", *argv, "--json", str(js)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bars off a terminal
    fetched = {r.path.rsplit("/", 1)[-1] for r in server.log if "/resolve/" in r.path}
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= fetched
    data = json.loads(js.read_text())
    assert data["run"]["model_commit"] == repo.commit
    ids = _word_tokenizer()((root / "text.txt").read_text())["input_ids"]
    for k, n in enumerate((32, 64)):
        ppl = _hand_evaluation(model, ids, n, n)[0]
        assert data["perplexity"]["none"]["perplexity"][k] == pytest.approx(ppl, rel=1e-6)


# ---------------------------------------------------------------- the guide's report


def test_the_guides_report_is_made_by_the_command_line(tmp_path):
    """docs/make_context_report.py, as the docs build runs it: the table,
    figure and JSON of ``posenc context`` on its tiny Llama."""
    require("matplotlib")
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    if docs not in sys.path:
        sys.path.insert(0, docs)
    import make_context_report as script

    assert script.main(["--out", str(tmp_path)]) == 0
    page = (tmp_path / "context_report.md").read_text()
    assert page.startswith("```text\n$ posenc context llama-tiny --methods none")
    assert "| method | 128 | 256 | 512 |" in page and page.endswith("```\n")
    assert (tmp_path / "context_report.png").stat().st_size > 0
    data = json.loads((tmp_path / "context_report.json").read_text())
    assert data["lengths"] == [128, 256, 512] and data["run"]["passkey"]["trials"] == 2
    folder = tmp_path / script.NAME
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = transformers.AutoTokenizer.from_pretrained(folder)((tmp_path / "text.txt").read_text())[
        "input_ids"
    ]
    ppl = _hand_evaluation(model, ids, 128, 128)[0]
    assert data["perplexity"]["none"]["perplexity"][0] == pytest.approx(ppl, rel=1e-6)


def test_the_cpus_free_memory_is_the_least_of_the_machines_and_the_containers(monkeypatch):
    from posenc.context import _memory

    monkeypatch.setattr(_memory, "_meminfo_available", lambda: 8 * 2**30)
    monkeypatch.setattr(_memory, "_cgroup_available", lambda: 2 * 2**30)
    assert context.free_memory("cpu") == 2 * 2**30
    monkeypatch.setattr(_memory, "_cgroup_available", lambda: None)  # no limit
    assert context.free_memory(torch.device("cpu")) == 8 * 2**30
