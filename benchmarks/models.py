"""A transformers Llama patched by posenc.hf against the same model unpatched.

Times, on the CPU, in float32 and bfloat16: a forward pass over a prompt,
one decoding step with a KV cache, and the position work of a decoding step
alone (the rotary module's ``(cos, sin)`` for one position per sequence:
transformers' ``LlamaRotaryEmbedding`` against posenc's ``RotaryEmbedding``
looking up its cached tables).  Medians of several repeats after a warm-up,
in milliseconds; ``ratio`` is patched / unpatched (1.0 or less: no slower).

    python benchmarks/models.py            # a small realistic config
    python benchmarks/models.py --seq 1024 # a longer prompt
    python benchmarks/models.py --quick    # a tiny one, a few seconds
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch


def _median_ms(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _model(quick, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    if quick:
        config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2)  # fmt: skip
    else:  # a small Llama-3-like model: 4 layers, head_dim 64, grouped-query attention
        config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                             num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                             max_position_embeddings=8192,
                             rope_parameters={
                                 "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192})  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval().to(dtype)


def _timings(quick: bool, repeats: int, dtype: torch.dtype, seq: int = 512) -> dict:
    """{"unpatched": {...}, "patched": {...}} for one dtype."""
    import posenc.hf

    prompt = 32 if quick else seq
    model = _model(quick, dtype)
    ids = torch.randint(1, model.config.vocab_size, (1, prompt))
    with torch.no_grad():
        out = model(ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    step = torch.randint(1, model.config.vocab_size, (1, 1))
    pos = torch.tensor([[prompt]])
    x = torch.zeros(1, dtype=dtype)

    def forward():
        with torch.no_grad():
            model(ids, use_cache=False)

    def decode():
        with torch.no_grad():
            model(step, cache=cache, position_ids=pos, use_cache=True)
            cache.crop(-1)  # the same cache each time: the step's token removed

    def position_work():
        model.model.rotary_emb(x, pos)

    timings = {}
    for label in ("unpatched", "patched"):
        if label == "patched":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                posenc.hf.patch(model)
        timings[label] = {
            "forward": _median_ms(forward, repeats),
            "decode step": _median_ms(decode, repeats * 4),
            "decode positions": _median_ms(position_work, repeats * 20),
        }
    posenc.hf.unpatch(model)
    return timings


def run(quick: bool, repeats: int, seq: int = 512) -> list:
    import transformers

    transformers.logging.set_verbosity_error()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        timings = _timings(quick, repeats, dtype, seq)
        for what in timings["unpatched"]:
            a, b = timings["unpatched"][what], timings["patched"][what]
            rows.append((str(dtype).replace("torch.", ""), what, a, b, b / a))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, a few seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seq", type=int, default=512, help="the prompt's length")
    args = parser.parse_args()
    rows = run(args.quick, args.repeats, args.seq)
    print(f"{'dtype':9} {'what':17} {'unpatched ms':>13} {'patched ms':>11} {'ratio':>6}")
    for dtype, what, a, b, ratio in rows:
        print(f"{dtype:9} {what:17} {a:13.3f} {b:11.3f} {ratio:6.2f}")


if __name__ == "__main__":
    main()
