"""A bfloat16 Mistral over 2048 tokens, patched by posenc.hf and not, against float64.

A tiny random-weight Mistral (2 layers, hidden 128, 4 heads of 32, 2
key/value heads, theta 1e4, no sliding window) whose weights are drawn
with ``initializer_range`` 0.2 (sharp attention: the softmax picks a few
keys, as a trained model's does; transformers' default, 0.02, makes it
nearly uniform, which hides the positions) or 0.02, for a few seeds.  Each
model reads 2048 tokens at positions ``start .. start + 2047`` (2048 ..
4095 by default, given as position ids); the float64 model, patched (its
tables formed in float64, as transformers forms its angles in float32
even there), is the witness, against the same weights in bfloat16
unpatched (transformers casts its ``inv_freq`` to bfloat16 with the
model) and patched (posenc's tables formed in float64 and rounded once).
The table gives, per seed, the largest and the mean absolute difference
of all the logits from the witness's, and the size of the witness's.
(The float64 model unpatched, angles in float32, is within 0.006 of the
witness there: the figures do not depend on which is taken.)

    python benchmarks/models_accuracy_long.py [--seeds 3] [--start 2048] [--length 2048]
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch


def models(seed: int, initializer_range: float, layers: int = 2, hidden: int = 128,
           heads: int = 4):  # fmt: skip
    """The float64 witness (patched), the bfloat16 model unpatched and
    patched, of one seed's random weights."""
    import transformers

    import posenc.hf

    config = transformers.MistralConfig(
        vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
        max_position_embeddings=8192, sliding_window=None, initializer_range=initializer_range,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )  # fmt: skip
    torch.manual_seed(seed)
    base = transformers.MistralForCausalLM(config).eval()
    witness = copy.deepcopy(base).to(torch.float64)
    unpatched = copy.deepcopy(base).to(torch.bfloat16)
    patched = copy.deepcopy(base).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warnings say what this measures
        posenc.hf.patch(witness)
        posenc.hf.patch(patched)
    return witness, unpatched, patched


def errors(seed: int, initializer_range: float, start: int, length: int, **sizes):
    """(largest, mean) |logits - witness's| of the unpatched and the patched
    bfloat16 model, and the largest |logit| of the witness."""
    witness, unpatched, patched = models(seed, initializer_range, **sizes)
    g = torch.Generator().manual_seed(100 + seed)
    ids = torch.randint(1, 512, (1, length), generator=g)
    positions = torch.arange(start, start + length)[None]
    with torch.no_grad():
        want = witness(ids, position_ids=positions, use_cache=False).logits
        out = []
        for model in (unpatched, patched):
            got = model(ids, position_ids=positions, use_cache=False).logits.double()
            diff = (got - want).abs()
            out.append((float(diff.max()), float(diff.mean())))
    return out[0], out[1], float(want.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--start", type=int, default=2048)
    parser.add_argument("--length", type=int, default=2048)
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    print("| initializer_range | seed | unpatched: max (mean) | patched: max (mean) | |logits| |")
    print("|---:|---:|---:|---:|---:|")
    for initializer_range in (0.2, 0.02):
        for seed in range(args.seeds):
            (a, b), (c, d), size = errors(seed, initializer_range, args.start, args.length)
            print(f"| {initializer_range} | {seed} | {a:.3f} ({b:.4f}) | {c:.3f} ({d:.4f}) "
                  f"| {size:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
