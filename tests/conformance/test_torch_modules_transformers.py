"""posenc.torch's modules against transformers' own modules and models.

The witnesses: transformers' rotary modules (Llama's, with the dynamic NTK
family; Phi-3's LongRoPE), a tiny Llama built on the meta device, and
DeBERTa-v2's ``DisentangledSelfAttention.disentangled_attention_bias``.
"""

import copy

import pytest
import test_hf_patch
from test_hf_patch import VOCAB, _build, _inputs, _logits, _patch_quietly

# test_hf_patch's fixtures: transformers (quiet) and posenc.hf
tf, hf = test_hf_patch.tf, test_hf_patch.hf


def _close(got, want, atol=1e-5):
    """Equal shapes and dtypes, values within transformers' float32 rounding."""
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        err = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
        assert err <= atol, err


def _llama_config(tf, **rope):
    return tf.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=16,
                          rope_parameters=dict({"rope_type": "default", "rope_theta": 10000.0},
                                               **rope))  # fmt: skip


# -- the config is read once ----------------------------------------------------------------


def test_rotary_keeps_what_it_read_when_the_config_is_edited(tf):
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from posenc.torch import RotaryEmbedding

    config = _llama_config(tf)
    theirs = LlamaRotaryEmbedding(config)
    mine = RotaryEmbedding(config=config)
    x = torch.zeros(1)
    _close(mine(x, torch.arange(8)[None]), theirs(x, torch.arange(8)[None]))
    # edited after both were built: the base, the family in the dict, the length
    config.rope_parameters["rope_theta"] = 10.0
    config.rope_parameters.update(rope_type="linear", factor=4.0)
    config.max_position_embeddings = 4
    ids = torch.arange(3000)[None]  # past the module's first table
    with torch.no_grad():
        want = theirs(x, ids)
    _close(mine(x, ids), want, atol=1e-4)  # float32 angles up to 3000 rad


def test_patched_model_keeps_its_frequencies_when_its_config_is_edited(tf, hf):
    import torch

    model = _build(tf, "llama")
    twin = copy.deepcopy(model)  # transformers' module: keeps the frequencies it was built with
    _patch_quietly(hf, model)
    _logits(model, _inputs(torch, "llama", length=8))  # the patched module's first table
    for m in (model, twin):
        m.config.rope_parameters["rope_theta"] = 10.0
        m.config.max_position_embeddings = 4
    inputs = _inputs(torch, "llama", length=300)  # past that table
    want = _logits(twin, inputs)
    got = _logits(model, inputs)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())


# -- position ids of every integer dtype ---------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
def test_rotary_takes_the_integer_ids_transformers_takes(tf, dtype):
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from posenc.torch import RotaryEmbedding

    config = _llama_config(tf)
    ids = torch.tensor([[0, 1, 5, 100, 127]], dtype=getattr(torch, dtype))
    x = torch.zeros(1)
    with torch.no_grad():
        want = LlamaRotaryEmbedding(config)(x, ids)
    _close(RotaryEmbedding(config=config)(x, ids), want)


def test_bool_position_ids_are_refused_where_transformers_reads_them_as_0_and_1(tf):
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from posenc.torch import RotaryEmbedding

    config = _llama_config(tf)
    mask = torch.tensor([[True, False, True]])
    x = torch.zeros(1)
    with torch.no_grad():  # transformers: positions 1, 0, 1, whatever the tensor meant
        cos, _ = LlamaRotaryEmbedding(config)(x, mask)
    assert torch.equal(cos[0, 0], cos[0, 2]) and not torch.equal(cos[0, 0], cos[0, 1])
    with pytest.raises(TypeError, match="position_ids must be an integer tensor"):
        RotaryEmbedding(config=config)(x, mask)


# -- dynamic NTK and LongRoPE past the tables ----------------------------------------------------

# each call's last position: growing, back within the trained length (16),
# decoding steps past it, far past it
_STEPS = [10, 20, 12, 40, 41, 42, 43, 5, 16, 17, 3000, 3001, 8]


@pytest.mark.parametrize("family", ["dynamic", "longrope"])
@pytest.mark.parametrize("table_bytes", [None, 1])
def test_length_dependent_families_past_the_tables(tf, monkeypatch, family, table_bytes):
    """Every call as transformers' stateful module makes it, whether its ids
    come from a cached table or are computed alone (``_TABLE_BYTES`` 1: no
    table at all)."""
    import torch

    import posenc.torch as pt

    if table_bytes is not None:
        monkeypatch.setattr(pt, "_TABLE_BYTES", table_bytes)
    if family == "dynamic":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as Module

        config = _llama_config(tf, rope_type="dynamic", factor=2.0)
    else:
        from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding as Module

        config = tf.Phi3Config(
            hidden_size=64, num_attention_heads=4, max_position_embeddings=64,
            original_max_position_embeddings=16,
            rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                          "long_factor": [1.5 + i for i in range(8)]},
        )  # fmt: skip
    theirs = Module(config)
    mine = pt.RotaryEmbedding(config=config)
    x = torch.zeros(1)
    for last in _STEPS:
        for ids in (torch.arange(last + 1)[None], torch.tensor([[last]])):  # prefill, a step
            with torch.no_grad():
                want = theirs(x, ids)
            _close(mine(x, ids), want, atol=1e-5 * max(1, last / 100))


# -- the meta device -----------------------------------------------------------------------------


def test_a_model_built_on_the_meta_device_is_patched_and_runs_there(tf, hf):
    import torch

    config = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=16)  # fmt: skip
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(config)
    assert model.model.rotary_emb.inv_freq.device.type == "meta"
    _patch_quietly(hf, model)
    ids = torch.randint(1, VOCAB, (2, 7)).to("meta")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.device.type == "meta" and logits.shape == (2, 7, VOCAB)
    # its tables, on real tensors: transformers' module's
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    x = torch.zeros(1)
    with torch.no_grad():
        want = LlamaRotaryEmbedding(config)(x, torch.arange(40)[None])
    _close(model.model.rotary_emb(x, torch.arange(40)[None]), want)


@pytest.mark.parametrize("attn_type", ["bi", "uni"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_xlnets_position_term_on_the_meta_device_has_xlnets_shape(tf, attn_type, dtype):
    # XLPositionTerm raised TypeError (a meta tensor is not on the CPU)
    import torch
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    from posenc.hf import _XLNetAttentionCore
    from posenc.torch import XLPositionTerm

    dtype = getattr(torch, dtype)
    config = tf.XLNetConfig(d_model=32, n_head=4, d_inner=64, attn_type=attn_type)
    attention = XLNetRelativeAttention(config).to(device="meta", dtype=dtype)
    q_len, k_len, batch = 5, 8, 2
    rows = k_len + (q_len if attn_type == "bi" else 1)  # XLNet's table for its attn_type

    def meta(*shape):
        return torch.empty(*shape, dtype=dtype, device="meta")

    q, k, v, r = meta(q_len, batch, 4, 8), meta(k_len, batch, 4, 8), meta(k_len, batch, 4, 8), \
        meta(rows, batch, 4, 8)  # fmt: skip
    # transformers' position term, as rel_attn_core makes it
    bd = torch.einsum("ibnd,jbnd->bnij", q + attention.r_r_bias, r)
    want = attention.rel_shift_bnij(bd, klen=k_len)
    got = XLPositionTerm(attention.r_r_bias, layout="ibnd")(
        q, r, k_len=k_len, causal=attn_type == "uni"
    )
    assert got.device.type == "meta"
    assert (got.shape, got.dtype) == (want.shape, want.dtype) == ((batch, 4, q_len, k_len), dtype)
    # the patched attention core on the meta device, as XLNet's own
    mask = meta(q_len, k_len, batch, 1) if attn_type == "uni" else None
    want = attention.rel_attn_core(q, k, v, r, attn_mask=mask, output_attentions=True)
    got = _XLNetAttentionCore(attention)(q, k, v, r, attn_mask=mask, output_attentions=True)
    for a, b in zip(got, want):
        assert a.device.type == "meta" and (a.shape, a.dtype) == (b.shape, b.dtype)


@pytest.mark.parametrize("q_len, k_len", [(9, 9), (40, 40)])
def test_debertas_attention_bias_on_the_meta_device_has_debertas_shape(tf, q_len, k_len):
    # DebertaRelativeBias raised TypeError (a meta tensor is not on the CPU)
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    from posenc.hf import _DebertaBias

    config = tf.DebertaV2Config(
        hidden_size=32, num_attention_heads=4, relative_attention=True, position_buckets=8,
        max_relative_positions=16, pos_att_type=["c2p", "p2c"],
    )  # fmt: skip
    attention = DisentangledSelfAttention(config).to("meta")
    span = attention.pos_ebd_size
    q = torch.empty(2 * 4, q_len, 8, device="meta")
    k = torch.empty(2 * 4, k_len, 8, device="meta")
    rel = torch.empty(2 * span, 32, device="meta")
    want = attention.disentangled_attention_bias(q, k, None, rel, 3)
    got = _DebertaBias(attention)(q, k, None, rel, 3)  # DebertaRelativeBias, layout "(bh)sd"
    assert got.device.type == "meta"
    assert (got.shape, got.dtype) == (want.shape, want.dtype) == ((8, q_len, k_len), torch.float32)


# -- DeBERTa-v2's scale factor -------------------------------------------------------------------


@pytest.mark.parametrize("pos_att_type", [["c2p"], ["p2c"], ["c2p", "p2c"]])
def test_deberta_default_scale_factor_is_deberta_v2s(tf, pos_att_type):
    """DeBERTa-v2 passes ``1 + len(pos_att_type)`` as scale_factor: the
    module's default (1 + the terms given)."""
    import torch

    from posenc.torch import DebertaRelativeBias

    torch.manual_seed(0)
    config = tf.DebertaV2Config(
        hidden_size=32, num_attention_heads=4, relative_attention=True, position_buckets=8,
        max_relative_positions=16, pos_att_type=pos_att_type, share_att_key=False,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    attention = DisentangledSelfAttention(config).eval()
    heads, span = attention.num_attention_heads, attention.pos_ebd_size
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2 * heads, 9, 8, generator=g)
    k = torch.randn(2 * heads, 9, 8, generator=g)
    rel = torch.randn(2 * span, 32, generator=g)
    with torch.no_grad():
        want = attention.disentangled_attention_bias(q, k, None, rel, 1 + len(pos_att_type))
        projected = rel[: 2 * span].unsqueeze(0)
        pos_key = pos_query = None
        if "c2p" in pos_att_type:
            pos_key = attention.transpose_for_scores(attention.pos_key_proj(projected), heads)
        if "p2c" in pos_att_type:
            pos_query = attention.transpose_for_scores(attention.pos_query_proj(projected), heads)
        module = DebertaRelativeBias(position_buckets=8, max_relative_positions=16,
                                     n_heads=heads, layout="(bh)sd")  # fmt: skip
        got = module(q, k, pos_key, pos_query)  # scale_factor by default
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    other = module(q, k, pos_key, pos_query, scale_factor=len(pos_att_type) + 2)
    assert float((other - want).abs().max()) > 1e-2 * float(want.abs().max())
