"""bfloat16 logits of a Llama patched by posenc.hf and unpatched, against float64.

A tiny random-weight Llama (its config allows 32k positions; queries and
keys scaled up so that its attention is as sharp as a trained model's,
where random weights' is nearly uniform and hides the positions), the same
weights in float64 (the witness: transformers' own model, its rotary
tables formed in float64 by posenc's patch, since transformers forms its
angles in float32 even there) and in bfloat16, patched and unpatched.
Each model reads the same 16 tokens, 8 at positions ``0 .. 7`` and 8 at
``p .. p + 7`` (position ids with a gap, as a long context would put them
apart), for ``p`` up to 32k; the table gives the largest absolute
difference of the last 8 tokens' bfloat16 logits from the float64 ones,
and the mean; and the largest error of the bfloat16 cos table at
``p .. p + 7`` (transformers casts its ``inv_freq`` to bfloat16 with the
model, posenc's patch forms the tables in float64 and rounds them once).

    python benchmarks/models_accuracy.py                  # the table
    python benchmarks/models_accuracy.py --plot out.png   # and the plot
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch

OFFSETS = [8, 256, 1024, 4096, 8192, 16384, 24576, 32760]


def _models():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=32768, rope_parameters={
                             "rope_type": "default", "rope_theta": 500000.0})  # fmt: skip
    torch.manual_seed(0)
    base = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharp attention (random weights' is nearly uniform): positions matter
        for layer in base.model.layers:
            layer.self_attn.q_proj.weight.mul_(12.0)
            layer.self_attn.k_proj.weight.mul_(12.0)
    return base, config


def _logits(model, ids, offset):
    # 8 tokens at the start, 8 at `offset`: query-key distances up to it
    pos = torch.cat([torch.arange(8), torch.arange(offset, offset + 8)])[None]
    with torch.no_grad():
        # the last 8 tokens' logits: theirs attend across the gap
        return model(ids, position_ids=pos, use_cache=False).logits[:, 8:].double()


def run():
    import posenc.hf

    base, config = _models()
    ids = torch.randint(1, config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    witness = copy.deepcopy(base).to(torch.float64)
    unpatched = copy.deepcopy(base).to(torch.bfloat16)
    patched = copy.deepcopy(base).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posenc.hf.patch(witness)
        posenc.hf.patch(patched)
    rows = []
    x = torch.zeros(1, dtype=torch.bfloat16)
    for offset in OFFSETS:
        want = _logits(witness, ids, offset)
        pos = torch.arange(offset, offset + 8)[None]
        cos64 = witness.model.rotary_emb(torch.zeros(1, dtype=torch.float64), pos)[0]
        row = [offset]
        for model in (unpatched, patched):
            diff = (_logits(model, ids, offset) - want).abs()
            cos = model.model.rotary_emb(x, pos)[0].double()
            row += [diff.max().item(), diff.mean().item(), (cos - cos64).abs().max().item()]
        rows.append(row)
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    offsets = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(5.2, 3.0), dpi=100)
    ax.plot(offsets, [r[3] for r in rows], "o-", label="cos, transformers (unpatched)")
    ax.plot(offsets, [r[6] for r in rows], "s-", label="cos, posenc.hf.patch")
    ax.plot(offsets, [r[1] for r in rows], "o:", color="C0", label="logits, unpatched")
    ax.plot(offsets, [r[4] for r in rows], "s:", color="C1", label="logits, patched")
    ax.set_xlabel("position p")
    ax.set_ylabel("max |bfloat16 - float64|")
    ax.set_yscale("log")
    ax.set_title("A bfloat16 Llama against float64, by position", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", help="write the plot (PNG) here")
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    rows = run()
    print("| p | cos unpatched | cos patched | logits unpatched max (mean) "
          "| logits patched max (mean) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for offset, a, b, c, d, e, f in rows:
        print(f"| {offset} | {c:.4f} | {f:.4f} | {a:.4f} ({b:.4f}) | {d:.4f} ({e:.4f}) |")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
