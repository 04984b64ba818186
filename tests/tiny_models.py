"""The tiny transformers models the tests build (random weights, a few
thousand parameters): one place for their configs, so that every test file
makes them alike.  A module shared by the test files, not collected by pytest.
"""

import pytest
from optional import require


def block(hidden, layers, heads, ffn):
    """The sizes that BERT's and Llama's configs name alike: hidden size,
    layers, attention heads, feed-forward size."""
    return dict(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
    )


#: The attention block of the tiny encoders: hidden 16, 1 layer, 2 heads.
SMALL = block(16, 1, 2, 32)


def _make(cls_name, config_name, seed, kwargs):
    torch, transformers = require("torch"), require("transformers")
    if seed is not None:
        torch.manual_seed(seed)
    config = getattr(transformers, config_name)(**kwargs)
    return getattr(transformers, cls_name)(config).eval()


def gpt2(cls="GPT2LMHeadModel", *, seed=0, **overrides):
    """A GPT-2 of 16 dims, 2 layers, 2 heads, 30 tokens, 64 positions."""
    kwargs = dict(n_positions=64, n_embd=16, n_layer=2, n_head=2, vocab_size=30)
    return _make(cls, "GPT2Config", seed, {**kwargs, **overrides})


def bert(cls="BertModel", *, seed=0, **overrides):
    """A BERT of :data:`SMALL`'s size, 30 tokens, 48 positions."""
    kwargs = dict(vocab_size=30, max_position_embeddings=48, **SMALL)
    return _make(cls, "BertConfig", seed, {**kwargs, **overrides})


def roberta(cls="RobertaModel", *, seed=0, config="RobertaConfig", **overrides):
    """A RoBERTa of :data:`SMALL`'s size, 40 tokens, 66 positions (or, by
    `config`, a family of the same shape: XLM-RoBERTa, CamemBERT)."""
    kwargs = dict(vocab_size=40, max_position_embeddings=66, **SMALL)
    return _make(cls, config, seed, {**kwargs, **overrides})


def opt(cls="OPTModel", *, seed=0, **overrides):
    """An OPT of :data:`SMALL`'s size, 40 tokens, 24 positions."""
    kwargs = dict(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        ffn_dim=32,
        num_attention_heads=2,
        max_position_embeddings=24,
        word_embed_proj_dim=16,
    )
    return _make(cls, "OPTConfig", seed, {**kwargs, **overrides})


def t5(cls="T5Model", *, seed=0, config="T5Config", **overrides):
    """A T5 of 16 dims, 1 layer of 2 heads of 8, 40 tokens (or, by `config`,
    a family of the same shape: MT5, UMT5, LongT5)."""
    kwargs = dict(vocab_size=40, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    return _make(cls, config, seed, {**kwargs, **overrides})


def bart(cls="BartModel", *, seed=0, **overrides):
    """A BART of 16 dims, one encoder and one decoder layer of 2 heads."""
    side = dict(layers=1, attention_heads=2, ffn_dim=32)  # the encoder's and the decoder's
    kwargs = {f"{part}_{key}": n for part in ("encoder", "decoder") for key, n in side.items()}
    kwargs.update(vocab_size=50, d_model=16, max_position_embeddings=30)
    return _make(cls, "BartConfig", seed, {**kwargs, **overrides})


def llama(cls="LlamaForCausalLM", *, seed=0, config="LlamaConfig", **overrides):
    """A Llama-shaped RoPE decoder: hidden 32, 2 layers, 4 query heads and 2
    key/value heads of 8 dims, rope_theta 500000, 40 tokens."""
    kwargs = dict(block(32, 2, 4, 64), vocab_size=40, num_key_value_heads=2, rope_theta=500000.0)
    return _make(cls, config, seed, {**kwargs, **overrides})


def llama4_text_config(**overrides):
    """Llama 4's text config with :data:`SMALL`'s attention block (its layers
    given by the caller): 1 key/value head of 8 dims, 2 experts whose
    feed-forward is 32 wide, 32 tokens."""
    experts = dict(num_local_experts=2, intermediate_size_mlp=32)
    kwargs = dict(SMALL, num_key_value_heads=1, head_dim=8, vocab_size=32, **experts)
    return require("transformers").Llama4TextConfig(**{**kwargs, **overrides})


#: Llama 3's frequency scaling as its checkpoints carry it, but for
#: ``original_max_position_embeddings`` (the caller's).
LLAMA3_ROPE = dict(
    rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0
)


def patch_families(width, vocab):
    """The model families posenc.hf.patch is tried on, as ``{name: (config
    class, model class, config keywords)}`` (transformers' class names):
    every kind it patches (rotary modules, sin/cos tables, ALiBi, T5's
    bias, DeBERTa-v2's and XLNet's relative attention) and three it refuses
    (``bert``, ``gpt2``, ``esm``).

    Two layers each (the refused ones one), `vocab` tokens, padding id 0;
    sizes follow `width` (a multiple of 16): the rotary decoders are
    `width` wide with 4 query heads of ``width / 4`` dims and 2 key/value
    heads, 16 positions; ALiBi's models 6 heads (``bloom12``, ``mpt12``:
    12 heads of 2 dims); T5's, DeBERTa's and XLNet's ``width / 2`` wide."""
    w = width
    small = dict(block(w, 2, 4, w), vocab_size=vocab, num_key_value_heads=2,
                 max_position_embeddings=16, pad_token_id=0)  # fmt: skip
    t5 = dict(vocab_size=vocab, d_model=w // 2, d_kv=w // 8, d_ff=w, num_layers=2, num_heads=4,
              decoder_start_token_id=0, pad_token_id=0,
              relative_attention_max_distance=20)  # fmt: skip
    # GPT-J and CodeGen: a sin/cos table, the pairs interleaved
    sincos = dict(vocab_size=vocab, n_embd=w, n_layer=2, n_head=4, rotary_dim=w // 8,
                  n_positions=64, pad_token_id=0)  # fmt: skip
    alibi = dict(vocab_size=vocab, pad_token_id=0)
    bloom = dict(alibi, hidden_size=3 * w // 4, n_layer=2, n_head=6)
    mpt = dict(alibi, d_model=3 * w // 4, n_layers=2, n_heads=6, max_seq_len=64)
    relative = dict(vocab_size=vocab, pad_token_id=0)
    families = {
        "llama": ("LlamaConfig", "LlamaForCausalLM", small),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", small),
        "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(small, rope_parameters=dict(
            LLAMA3_ROPE, original_max_position_embeddings=8))),
        "dynamic": ("LlamaConfig", "LlamaForCausalLM", dict(small, rope_parameters={
            "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(small, head_dim=w // 4,
                                                                 sliding_window=4)),
        "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(
            small, num_key_value_heads=4, max_position_embeddings=64,
            original_max_position_embeddings=8,
            rope_scaling={"type": "longrope", "short_factor": [1.0] * (w // 8),
                          "long_factor": [1.5 + i for i in range(w // 8)]})),
        # 4 of each head's dims rotated
        "neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(small, rotary_pct=16 / w)),
        "gptj": ("GPTJConfig", "GPTJForCausalLM", sincos),
        "codegen": ("CodeGenConfig", "CodeGenForCausalLM", sincos),
        # GPT-OSS: half-width tables
        "gptoss": ("GptOssConfig", "GptOssForCausalLM", dict(
            small, head_dim=w // 4, num_local_experts=2, num_experts_per_tok=1)),
        "bloom": ("BloomConfig", "BloomForCausalLM", bloom),
        "bloom12": ("BloomConfig", "BloomForCausalLM", dict(bloom, hidden_size=24, n_head=12)),
        "mpt": ("MptConfig", "MptForCausalLM", mpt),
        "mpt12": ("MptConfig", "MptForCausalLM", dict(mpt, d_model=24, n_heads=12)),
        "falcon": ("FalconConfig", "FalconForCausalLM", dict(
            alibi, hidden_size=3 * w // 4, num_hidden_layers=2, num_attention_heads=6,
            alibi=True)),
        "t5": ("T5Config", "T5ForConditionalGeneration", t5),
        "mt5": ("MT5Config", "MT5ForConditionalGeneration", t5),
        "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", t5),
        # LongT5: local attention in the encoder (blocks of local_radius + 1), T5's in the decoder
        "longt5": ("LongT5Config", "LongT5ForConditionalGeneration", dict(t5, local_radius=3)),
        "longt5_tglobal": ("LongT5Config", "LongT5ForConditionalGeneration", dict(
            t5, local_radius=3, global_block_size=4, encoder_attention_type="transient-global")),
        "deberta": ("DebertaV2Config", "DebertaV2ForMaskedLM", dict(
            relative, **block(w // 2, 2, w // 16, w), max_position_embeddings=64,
            relative_attention=True, pos_att_type=["c2p", "p2c"], position_buckets=8,
            max_relative_positions=16)),
        "xlnet": ("XLNetConfig", "XLNetLMHeadModel", dict(
            relative, d_model=w // 2, n_layer=2, n_head=w // 16, d_inner=w)),
        # what patch refuses: learned tables, ESM's rotary module
        "bert": ("BertConfig", "BertForMaskedLM", dict(SMALL, vocab_size=vocab)),
        "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(
            vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=64)),
        "esm": ("EsmConfig", "EsmForMaskedLM", dict(
            SMALL, vocab_size=vocab, position_embedding_type="rotary", pad_token_id=0,
            mask_token_id=1)),
    }  # fmt: skip
    return families


#: The words of the tokenizer :func:`save_with_tokenizer` saves.
WORDS = ["[UNK]", "[MASK]", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "."]


def save_with_tokenizer(model, folder):
    """save_pretrained, and a word-level tokenizer of :data:`WORDS` beside it;
    the folder, as a string."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", mask_token="[MASK]"
    )
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)
