"""The guides' figures, computed by posenc itself at each docs build.

- ``rope_frequencies.png`` (the RoPE guide): the inverse frequency of each
  rotary pair under each scaling family, from :func:`posenc.rope_frequencies`,
  on one log scale, with the wavelengths on the right-hand axis;
- ``bias_heatmaps.png`` (the bias guides): ALiBi, T5, KERPLE, Sandwich and
  FIRE over query x key, one head each, from posenc's bias functions.

Written into ``docs/_generated`` (not a source folder of the build, and not
in git) with matplotlib's Agg backend; the inputs are fixed, so a build gives
the same pictures.  The docs build runs it (docs/conf.py); by hand::

    python docs/make_figures.py [--out docs/_generated]
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# the RoPE figure: a 128-dim head, base 10000, trained on 4096 positions, stretched 8 times
DIM, BASE, ORIGINAL, FACTOR = 128, 10000.0, 4096, 8.0
SEQ_LEN = int(FACTOR * ORIGINAL)  # dynamic and longrope depend on it: a full stretched input
PAIRS = DIM // 2
# (label, scaling dict).  Not drawn: proportional (default's first pairs, angle 0 for the
# rest), resonance (default's, each wavelength rounded to a whole number of positions: on
# this scale the same line) and axial (two ladders of default's for a vision tower)
FAMILIES = [
    ("default", None),
    (f"linear (factor {FACTOR:g})", {"rope_type": "linear", "factor": FACTOR}),
    (
        f"dynamic NTK (factor {FACTOR:g}, {SEQ_LEN} positions)",
        {"rope_type": "dynamic", "factor": FACTOR, "max_position_embeddings": ORIGINAL},
    ),
    (
        f"yarn (factor {FACTOR:g})",
        {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": ORIGINAL},
    ),
    (
        f"llama3 (factor {FACTOR:g})",
        {
            "rope_type": "llama3",
            "factor": FACTOR,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": ORIGINAL,
        },
    ),
    (
        "longrope (long factors 1 to 8, made up)",
        {
            "rope_type": "longrope",
            "short_factor": [1.0] * PAIRS,
            "long_factor": (1.0 + (FACTOR - 1.0) * np.linspace(0.0, 1.0, PAIRS) ** 2).tolist(),
            "factor": FACTOR,
            "original_max_position_embeddings": ORIGINAL,
        },
    ),
    ("ntk_alpha (alpha 8)", {"rope_type": "ntk_alpha", "alpha": FACTOR}),
]

# the bias figure: 64 queries and keys, the symmetric forms (causal=False)
N = 64


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path):
    # no version or date in the file: the same inputs give the same bytes
    fig.savefig(path, dpi=100, metadata={"Software": None})


def _wavelength(f):
    """2 pi / f, both ways (matplotlib asks for 0 too: infinity, quietly)."""
    with np.errstate(divide="ignore"):
        return 2 * np.pi / np.asarray(f, dtype=np.float64)


def rope_frequencies(outdir):
    """The inverse frequency of each pair, per family; returns the file name."""
    import posenc

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5.2), layout="constrained")
    styles = ["-", "--", "-.", ":"]
    pairs = np.arange(PAIRS)
    for n, (label, scaling) in enumerate(FAMILIES):
        inv_freq, _ = posenc.rope_frequencies(DIM, base=BASE, scaling=scaling, seq_len=SEQ_LEN)
        shown = np.where(inv_freq > 0, inv_freq, np.nan)  # angle 0 has no place on a log axis
        ax.plot(pairs, shown, styles[n % 4], linewidth=1.6, label=label)
    ax.set_yscale("log")
    ax.set_xlim(0, PAIRS - 1)
    ax.set_xlabel(f"pair index i (head_dim {DIM}, base {BASE:g})")
    ax.set_ylabel("inverse frequency (radians per position)")
    right = ax.secondary_yaxis("right", functions=(_wavelength, _wavelength))
    right.set_ylabel("wavelength (positions)")
    ax.axhline(2 * math.pi / ORIGINAL, color="grey", linewidth=0.8)
    ax.text(1, 2 * math.pi / ORIGINAL * 1.25, f"wavelength {ORIGINAL}: the trained length",
            color="grey", fontsize=8)  # fmt: skip
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    name = "rope_frequencies.png"
    _save(fig, os.path.join(outdir, name))
    plt.close(fig)
    return name


def _biases():
    """[(title, (N, N) bias)]: one head of each bias, queries and keys 0 .. N-1."""
    import posenc

    buckets = np.arange(32)
    table = (-0.25 * (buckets % 16) - 0.5 * (buckets >= 16))[:, None]  # falls bucket by bucket
    # FIRE's MLP, Linear(1, 8), ReLU, Linear(8, 1): -sum_k relu(x - k/8), falling with x
    w1, b1 = np.ones((8, 1)), -np.arange(8) / 8
    w2, b2 = -np.ones((1, 8)), np.zeros(1)
    return [
        ("ALiBi\n(slope 1/8)", posenc.alibi_bias(8, N, causal=False, dtype="float64")[2]),
        (
            "T5 (32 buckets, a table\nfalling by bucket)",
            posenc.t5_bias(table, N, bidirectional=True, max_distance=128)[0],
        ),
        (
            "KERPLE, log kernel\n(r1 1, r2 0.5)",
            posenc.kerple_bias([1.0], [0.5], N, causal=False, dtype="float64")[0],
        ),
        (
            "Sandwich\n(dim 64, head 1 of 8)",
            posenc.sandwich_bias(8, N, dim=64, causal=False, dtype="float64")[0],
        ),
        (
            "FIRE (an MLP falling\nwith x, threshold 16)",
            posenc.fire_bias(w1, b1, w2, b2, 0.5, 16.0, N, causal=False, dtype="float64")[0],
        ),
    ]


def bias_heatmaps(outdir):
    """The five biases over query x key; returns the file name."""
    plt = _pyplot()
    biases = _biases()
    fig, axes = plt.subplots(1, len(biases), figsize=(15, 3.6), layout="constrained")
    for ax, (title, bias) in zip(axes, biases):
        image = ax.imshow(bias, cmap="viridis", interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        fig.colorbar(image, ax=ax, shrink=0.8)
    name = "bias_heatmaps.png"
    _save(fig, os.path.join(outdir, name))
    plt.close(fig)
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "_generated"))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rope_frequencies(args.out)
    bias_heatmaps(args.out)
    return 0


if __name__ == "__main__":
    import report_snapshot

    report_snapshot.use_this_tree()
    sys.exit(main())
