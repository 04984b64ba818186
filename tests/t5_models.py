"""T5's relative attention bias in the tests: the bucket configurations
several files check, and transformers' T5Attention built small (a module
shared by the test files, not collected by pytest)."""

# (bidirectional, num_buckets, max_distance) that every T5 bucket test checks,
# against posenc.reference and against transformers' T5Attention
BUCKET_CONFIGS = [
    (True, 32, 128),  # T5, LongT5, UMT5 encoders
    (False, 32, 128),  # their decoders
    # float32 arithmetic puts distances that sit exactly on a boundary
    # (log(2) / log(32) * 10 = 2) in the upper bucket; float64 would not
    (False, 20, 320),
    (True, 40, 320),
    # more and fewer buckets, longer and shorter reach
    (True, 64, 256),
    (True, 64, 512),
    (False, 64, 1024),
    (True, 1000, 100000),
    (True, 16, 64),
    (False, 8, 20),
    (False, 30, 480),
    # one exact distance; max_distance just past the exact distances
    (False, 2, 1000),
    (True, 4, 2),
    (False, 7, 4),  # and an odd number of buckets
]

# One bucket per direction (no exact distances): posenc's own definition,
# where T5Attention's formula divides by zero; checked against the reference.
ONE_BUCKET_PER_DIRECTION = [(True, 2, 5), (True, 3, 1)]


def t5_attention(torch, is_decoder, num_buckets=32, max_distance=128, n_heads=4, table=None):
    """transformers' T5Attention with a relative bias (d_model 16, heads of
    4), its table random or a copy of `table` (num_buckets, n_heads)."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=1,
        num_heads=n_heads if table is None else table.shape[1],
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=is_decoder,
    )
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    if table is not None:
        with torch.no_grad():
            attention.relative_attention_bias.weight.copy_(torch.from_numpy(table))
    return attention
