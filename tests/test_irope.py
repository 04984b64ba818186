"""Llama 4's iRoPE: the per-layer NoPE/RoPE pattern against transformers'
Llama4 config and attention modules, the chunked mask against its masking
utilities, hand-derived cases; bad input refused."""

import numpy as np
import pytest
from optional import require
from tiny_models import llama4_text_config

from posenc import _reference_newer as reference
from posenc._irope import IRoPELayers, chunked_causal_mask, irope_layers

# --- Llama 4's iRoPE pattern ---------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_hidden_layers=8),
        dict(num_hidden_layers=7, no_rope_layer_interval=3),
        dict(num_hidden_layers=5, no_rope_layers=[1, 0, 0, 1, 1]),
        dict(
            num_hidden_layers=3,
            no_rope_layers=[0, 1, 1, 0],
            layer_types=["full_attention", "chunked_attention", "full_attention"],
        ),
        dict(num_hidden_layers=4, attention_chunk_size=None),
        dict(num_hidden_layers=6, interleave_moe_layer_step=2, use_qk_norm=False),
        dict(num_hidden_layers=4, no_rope_layers=[]),
    ],
)
def test_irope_layers_match_transformers_config_and_modules(kwargs):
    require("torch")
    from transformers.models.llama4 import modeling_llama4

    config = llama4_text_config(**kwargs)
    got = irope_layers(config)
    assert isinstance(got, IRoPELayers)
    layers = config.num_hidden_layers
    attn = [modeling_llama4.Llama4TextAttention(config, i) for i in range(layers)]
    assert got.rope == tuple(bool(a.use_rope) for a in attn)
    assert got.qk_norm == tuple(hasattr(a, "qk_norm") for a in attn)
    assert got.temperature_tuning == tuple(
        a.attn_temperature_tuning and not a.use_rope for a in attn
    )
    assert got.layer_types == tuple(config.layer_types[:layers])
    assert got.moe == tuple(i in config.moe_layers for i in range(layers))
    assert got.attention_chunk_size == config.attention_chunk_size
    # the same from the dict of its keys, and from the twin
    assert irope_layers(kwargs | {"num_hidden_layers": layers}) == got
    flags, nope = reference.irope_rope_layers(
        layers, kwargs.get("no_rope_layers"), kwargs.get("no_rope_layer_interval", 4)
    )
    assert list(got.rope) == flags and list(got.nope_layers) == nope


def test_irope_layers_of_llama4_config_readsllama4_text_config():
    transformers = require("transformers")
    text = llama4_text_config(num_hidden_layers=8, no_rope_layer_interval=2)
    full = transformers.Llama4Config(text_config=text.to_dict())
    assert irope_layers(full) == irope_layers(text)
    assert irope_layers(
        {"text_config": {"num_hidden_layers": 8, "no_rope_layer_interval": 2}}
    ) == irope_layers(text)


def test_irope_layers_take_arrays_of_flags():
    flags = np.array([1, 1, 0, 1, 0])
    got = irope_layers({"num_hidden_layers": 5, "no_rope_layers": flags})
    assert got.nope_layers == (2, 4)
    assert irope_layers(
        {"num_hidden_layers": 4, "no_rope_layers": np.array([], int)}
    ).nope_layers == (3,)


def test_irope_layers_hand_derived_scout_defaults():
    # Llama4TextConfig's defaults: 48 layers, every 4th NoPE, chunks of 8192.
    got = irope_layers({})
    assert got.nope_layers == tuple(range(3, 48, 4))
    assert got.layer_types[:4] == ("chunked_attention",) * 3 + ("full_attention",)
    assert got.attention_chunk_size == 8192
    assert str(got).endswith("RRRN" * 12 + ")")


def test_irope_layers_bad_config_names_the_key():
    with pytest.raises(TypeError, match="config"):
        irope_layers(42)
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 4, "no_rope_layers": [1, 0]})
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": [1, 2]})
    with pytest.raises(ValueError, match="attention_chunk_size"):
        irope_layers({"num_hidden_layers": 2, "attention_chunk_size": 0})
    with pytest.raises(ValueError, match="layer_types"):
        irope_layers(
            {"num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"]}
        )
    with pytest.raises(ValueError, match="attention_chunk_size"):
        irope_layers(
            {
                "num_hidden_layers": 1,
                "attention_chunk_size": None,
                "layer_types": ["chunked_attention"],
            }
        )
    with pytest.raises(ValueError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": [1, 0, 1]})
    with pytest.raises(ValueError, match="layer_types"):
        irope_layers({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 3})
    with pytest.raises(TypeError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": "11"})
    with pytest.raises(TypeError, match="no_rope_layers"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layers": 1})
    with pytest.raises(ValueError, match="no_rope_layer_interval"):
        irope_layers({"num_hidden_layers": 2, "no_rope_layer_interval": 0})


# --- the chunked mask -----------------------------------------------------------


@pytest.mark.parametrize("q_len,chunk", [(1, 1), (7, 3), (12, 4), (5, 8)])
def test_chunked_mask_matches_transformers_prefill(q_len, chunk):
    torch = require("torch")
    from transformers.masking_utils import create_chunked_causal_mask

    config = llama4_text_config(num_hidden_layers=4, attention_chunk_size=chunk)
    config._attn_implementation = "eager"
    embeds = torch.zeros(1, q_len, 16)
    mask = create_chunked_causal_mask(
        config=config,
        inputs_embeds=embeds,
        attention_mask=None,
        cache=None,
        position_ids=torch.arange(q_len)[None],
    )
    want = (mask[0, 0] == 0).numpy()  # eager: 0 where seen, -inf where not
    got = chunked_causal_mask(q_len, chunk_size=chunk)
    assert got.dtype == np.bool_ and got.shape == (q_len, q_len)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, reference.chunked_causal_mask(q_len, q_len, chunk, 0))


@pytest.mark.parametrize("q_len,k_len,chunk", [(1, 9, 4), (3, 11, 4), (2, 5, 2), (1, 8, 8)])
def test_chunked_mask_decoding_matches_transformers_mask_function(q_len, k_len, chunk):
    torch = require("torch")
    from transformers.masking_utils import chunked_causal_mask_function, sdpa_mask

    q_offset = k_len - q_len
    fn = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long))
    want = sdpa_mask(
        batch_size=1,
        q_length=q_len,
        kv_length=k_len,
        q_offset=q_offset,
        kv_offset=0,
        mask_function=fn,
        allow_is_causal_skip=False,
    )[0, 0].numpy()
    np.testing.assert_array_equal(chunked_causal_mask(q_len, k_len, chunk_size=chunk), want)
    np.testing.assert_array_equal(
        chunked_causal_mask(q_len, chunk_size=chunk, q_offset=q_offset), want
    )


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 16, 64, 200])
def test_chunked_mask_matches_the_reference_at_any_offset(chunk):
    # few chunks (a triangle each) and many (more than 64: element by element),
    # queries that start inside a chunk, keys that end inside one
    rng = np.random.default_rng(chunk)
    for _ in range(20):
        q_len, q_offset = int(rng.integers(1, 150)), int(rng.integers(0, 150))
        k_len = int(rng.integers(1, q_len + q_offset + 20))
        got = chunked_causal_mask(q_len, k_len, chunk_size=chunk, q_offset=q_offset)
        want = reference.chunked_causal_mask(q_len, k_len, chunk, q_offset)
        np.testing.assert_array_equal(got, want)


def test_chunked_mask_hand_derived():
    # chunks of 2: a query sees the keys up to itself in its own chunk (x)
    seen = ["x....", "xx...", "..x..", "..xx.", "....x"]
    want = np.array([[c == "x" for c in row] for row in seen])
    np.testing.assert_array_equal(chunked_causal_mask(5, chunk_size=2), want)
    np.testing.assert_array_equal(chunked_causal_mask(2, 5, chunk_size=2), want[3:])


def test_chunked_mask_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_causal_mask(3, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        chunked_causal_mask(3, chunk_size=2.0)
    with pytest.raises(ValueError, match="q_len"):
        chunked_causal_mask(0, chunk_size=2)
    with pytest.raises(ValueError, match="k_len"):
        chunked_causal_mask(4, 3, chunk_size=2)
    with pytest.raises(ValueError, match="q_offset"):
        chunked_causal_mask(4, chunk_size=2, q_offset=-1)
    with pytest.raises(ValueError, match="q_len"):
        chunked_causal_mask(2**40, chunk_size=2)


# --- sizes and int64 edges ------------------------------------------------------


def test_irope_layers_refuse_more_layers_than_the_limit_naming_the_key():
    # (2**16 + 1 first: it was made, layer by layer; 2**40 never returned)
    for layers in (2**16 + 1, 2**40, 2**63 - 1, 2**63, np.int64(2**63 - 1), np.uint64(2**64 - 1)):
        with pytest.raises(ValueError, match="num_hidden_layers must be <= 65536"):
            irope_layers({"num_hidden_layers": layers})
    with pytest.raises(ValueError, match="num_hidden_layers must be >= 1"):
        irope_layers({"num_hidden_layers": -(2**63)})
    with pytest.raises(TypeError, match="num_hidden_layers"):
        irope_layers({"num_hidden_layers": np.True_})
    # the limit itself: every fourth layer NoPE, as the twin makes them
    got = irope_layers({"num_hidden_layers": 2**16})
    flags, nope = reference.irope_rope_layers(2**16, None, 4)
    assert list(got.rope) == flags and list(got.nope_layers) == nope and len(nope) == 2**14


class _Flags:
    """A no_rope_layers that says it is 2**62 long and holds the flags of
    `first`: reading past them is an error."""

    def __init__(self, first):
        self.first = first

    def __len__(self):
        return 2**62

    def __iter__(self):
        yield from self.first
        raise AssertionError("read past num_hidden_layers")


def test_irope_layers_read_no_more_entries_than_the_layers():
    layer_types = ["chunked_attention"] * 3 + ["full_attention"]
    got = irope_layers(
        {"num_hidden_layers": 4, "no_rope_layers": _Flags([1, 1, 1, 0]), "layer_types": layer_types}
    )
    assert got.nope_layers == (3,) and got.layer_types == tuple(layer_types)


def test_irope_layers_refuse_a_moe_layers_list_longer_than_the_limit():
    for listed in (range(2**16 + 1), range(2**62)):
        with pytest.raises(ValueError, match="moe_layers must list at most 65536"):
            irope_layers({"num_hidden_layers": 4, "moe_layers": listed})
    with pytest.raises(TypeError, match="moe_layers"):
        irope_layers({"num_hidden_layers": 4, "moe_layers": 3})
    # indices past the layers are not MoE layers, as transformers' `layer_idx in moe_layers`
    got = irope_layers({"num_hidden_layers": 4, "moe_layers": [1, 2**63, -(2**63), 2**70]})
    assert got.moe == (False, True, False, False)


@pytest.mark.parametrize("chunk,q_len,k_len", [(2, 200, 200), (50, 100, 100)])
def test_chunked_mask_counts_the_mask_and_its_temporary_against_memory(
    monkeypatch, chunk, q_len, k_len
):
    # many small chunks (element by element) and a few (triangles): two (q, k) bool arrays
    from posenc import _validate

    need = 2 * q_len * k_len
    monkeypatch.setattr(_validate, "memory_limit", lambda: (need - 1, "a small machine"))
    with pytest.raises(ValueError, match="q_len and k_len: 2 arrays of shape"):
        chunked_causal_mask(q_len, k_len, chunk_size=chunk)
    monkeypatch.setattr(_validate, "memory_limit", lambda: (need, "a small machine"))
    got = chunked_causal_mask(q_len, k_len, chunk_size=chunk)
    np.testing.assert_array_equal(got, reference.chunked_causal_mask(q_len, k_len, chunk, 0))


CAUSAL4 = np.tri(4, dtype=bool)


@pytest.mark.parametrize(
    "kwargs, want",
    [
        # one chunk larger than any position: the causal mask
        (dict(q_len=4, chunk_size=2**63 - 1), CAUSAL4),
        (dict(q_len=4, chunk_size=2**63), CAUSAL4),
        (dict(q_len=4, chunk_size=np.uint64(2**64 - 1)), CAUSAL4),
        # queries at 2**63 - 1 and 2**63: in chunk 0 of 2**64 with keys 0..3, seeing them all
        (dict(q_len=2, k_len=4, chunk_size=2**64, q_offset=2**63 - 1), np.ones((2, 4), bool)),
        # ... and in chunks far past the keys' with chunks of 2: none
        (
            dict(q_len=2, k_len=4, chunk_size=2, q_offset=np.int64(2**63 - 1)),
            np.zeros((2, 4), bool),
        ),
    ],
)
def test_chunked_mask_at_the_int64_edges_by_hand(kwargs, want):
    np.testing.assert_array_equal(chunked_causal_mask(**kwargs), want)


def test_chunked_mask_integer_arguments_refused_by_name():
    for name in ("q_len", "k_len", "chunk_size", "q_offset"):
        kwargs = {"q_len": 2, "k_len": 4, "chunk_size": 2, "q_offset": 0}
        with pytest.raises(TypeError, match=name):
            chunked_causal_mask(**{**kwargs, name: True})
        with pytest.raises(ValueError, match=f"{name} must be >= "):
            chunked_causal_mask(**{**kwargs, name: -(2**63)})
    with pytest.raises(ValueError, match="q_len and k_len"):
        chunked_causal_mask(2, 2**63, chunk_size=2)
