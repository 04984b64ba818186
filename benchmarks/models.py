"""A transformers Llama patched by posenc.hf against the same model unpatched.

Times, on the CPU, in float32 and bfloat16: a forward pass over a prompt,
one decoding step with a KV cache, and the position work of a decoding step
and of the prompt alone (the rotary module's ``(cos, sin)`` for one position,
and for the prompt's positions: transformers' ``LlamaRotaryEmbedding``
against posenc's ``RotaryEmbedding`` looking up its cached tables).  Two
copies of the model, one patched, are timed in turn in every round, so that
the machine's load falls on both; minimum and median in milliseconds;
``ratio`` is patched / unpatched of the minima (1.0 or less: no slower).
``--clock cpu`` times the process's CPU time instead of the wall clock: with
``--threads 1``, the work itself, which other programs on a shared machine
move much less.

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

_CLOCK = time.perf_counter


def _interleaved_ms(fns, repeats):
    """Minimum and median milliseconds of each of ``fns``, timed in turn.

    The functions run one after the other in every round (A, B, A, B, ...),
    so that a change in the machine's load during the run falls on all of
    them alike; the minimum is the figure least moved by other work.
    """
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            start = _CLOCK()
            fn()
            ts.append((_CLOCK() - start) * 1e3)
    return [(min(ts), statistics.median(ts)) for ts in times]


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
    """{what: ((min, median) unpatched, (min, median) patched)} for one dtype.

    Two copies of one model, one patched: each measurement alternates
    between them.
    """
    import copy

    import posenc.hf

    prompt = 32 if quick else seq
    models = {"unpatched": _model(quick, dtype)}
    models["patched"] = copy.deepcopy(models["unpatched"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posenc.hf.patch(models["patched"])
    vocab = models["unpatched"].config.vocab_size
    ids = torch.randint(1, vocab, (1, prompt))
    step = torch.randint(1, vocab, (1, 1))
    pos = torch.tensor([[prompt]])
    x = torch.zeros(1, dtype=dtype)

    def forward(model):
        def run():
            with torch.no_grad():
                model(ids, use_cache=False)

        return run

    def decode(model):
        with torch.no_grad():
            out = model(ids, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values

        def run():
            with torch.no_grad():
                model(step, cache=cache, position_ids=pos, use_cache=True)
                cache.crop(-1)  # the same cache each time: the step's token removed

        return run

    def position_work(model):
        return lambda: model.model.rotary_emb(x, pos)

    prompt_pos = torch.arange(prompt)[None]

    def prompt_position_work(model):
        return lambda: model.model.rotary_emb(x, prompt_pos)

    timings = {}
    for what, make, n in (
        ("forward", forward, repeats),
        ("decode step", decode, repeats * 4),
        ("decode positions", position_work, repeats * 20),
        ("prompt positions", prompt_position_work, repeats * 20),
    ):
        timings[what] = _interleaved_ms([make(models["unpatched"]), make(models["patched"])], n)
    return timings


def run(quick: bool, repeats: int, seq: int = 512) -> list:
    import transformers

    transformers.logging.set_verbosity_error()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        timings = _timings(quick, repeats, dtype, seq)
        for what, (a, b) in timings.items():
            rows.append((str(dtype).replace("torch.", ""), what, a, b, b[0] / a[0]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, a few seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seq", type=int, default=512, help="the prompt's length")
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: its default)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or the process's CPU time (all its threads: "
                             "steadier than wall time on a machine others share)")  # fmt: skip
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        global _CLOCK
        _CLOCK = time.process_time
    rows = run(args.quick, args.repeats, args.seq)
    print(f"{'dtype':9} {'what':17} {'unpatched ms':>22} {'patched ms':>22} {'ratio':>6}")
    print(f"{'':9} {'':17} {'min (median)':>22} {'min (median)':>22} {'of min':>6}")
    for dtype, what, a, b, ratio in rows:
        cells = f"{a[0]:10.3f} ({a[1]:9.3f}) {b[0]:10.3f} ({b[1]:9.3f})"
        print(f"{dtype:9} {what:17} {cells} {ratio:6.2f}")


if __name__ == "__main__":
    main()
