"""The tiny transformers models the tests build (random weights, a few
thousand parameters): one place for their configs, so that every test file
makes them alike.  A module shared by the test files, not collected by pytest.
"""

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


def roberta(cls="RobertaModel", *, seed=0, **overrides):
    kwargs = dict(vocab_size=40, max_position_embeddings=66, **SMALL)
    return _make(cls, "RobertaConfig", seed, {**kwargs, **overrides})


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
