"""Several models side by side: one Markdown table per analysis of a model
(not of its table), a row per model, each figure beside its noise
(:func:`comparison_tables`), and one figure per analysis, a line or a panel
per model (:func:`plot_analysis`).

A model is given as ``(name, results, noise)``: ``results`` maps an
analysis (``"layer_probe"``, ``"skip_perplexity"``, ``"rope_usage"``,
``"rope_activations"``, ``"rope_logits"``, ``"relative_share"``,
``"t5_biases"``, ``"alibi"``) to its result, ``noise`` an analysis whose
result does not hold its baselines (``"rope_usage"``, ``"t5_biases"``) to
``{kind: {measure: (figure per seed, ...)}}`` (:func:`weight_noise`).

The noise of each analysis, and why it is the one a figure is read against:

- ``layer_probe``, ``skip_perplexity`` (:data:`posenc.probe.forward.FORWARD_KINDS`):
  the model run with its position tables random (row norms kept), and with
  its position ids shuffled; what survives both is what the model knows of
  position without its position code (a causal mask, for one);
- ``rope_activations`` (:data:`posenc.probe.rope_usage.ROPE_KINDS`): the
  model run with random q/k projections of the same row norms (what the
  norms alone give), and each head's pairs shuffled (the same norms, their
  frequencies forgotten);
- ``rope_usage``: the pairs shuffled;
- ``t5_biases``: each head's bucket biases shuffled across the buckets
  (:meth:`posenc.probe.T5BucketBiases.buckets_shuffled`);
- ``rope_logits``, ``relative_share``, ``alibi``: none.  A share of the
  logits has no version without positions that keeps the rest of the model
  (shuffled positions give rotations, and relative terms, of the same size),
  and ALiBi's slopes are fixed by the head count, not learned.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._typing import PathLike

#: The analyses :func:`comparison_tables` and :func:`plot_analysis` know, in order.
ANALYSES: Tuple[str, ...] = (
    "rope_usage",
    "alibi",
    "t5_biases",
    "layer_probe",
    "skip_perplexity",
    "rope_activations",
    "rope_logits",
    "relative_share",
)

#: What each analysis's noise is, as its table's title says it.
NOISE: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "layer_probe": (("random", "random table"), ("shuffled", "position ids shuffled")),
    "skip_perplexity": (("random", "random table"), ("shuffled", "position ids shuffled")),
    "rope_activations": (
        ("random", "random q/k projections"),
        ("shuffled", "pairs shuffled"),
    ),
    "rope_usage": (("shuffled", "pairs shuffled"),),
    "t5_biases": (("shuffled", "buckets shuffled"),),
}

Model = Tuple[str, Dict[str, Any], Dict[str, Dict[str, Dict[str, Tuple[float, ...]]]]]


def weight_noise(analysis: str, result: Any, seeds: int) -> Dict[str, Dict[str, Tuple[float, ...]]]:
    """The noise of an analysis of the weights (``"rope_usage"``: the slowest
    half's share with the pairs shuffled; ``"t5_biases"``: the mean local
    mass and decay with the buckets shuffled), for seeds ``0 .. seeds-1``:
    ``{kind: {measure: (figure per seed, ...)}}`` (empty for another
    analysis, or no seeds)."""
    if seeds < 1:
        return {}
    if analysis == "rope_usage":
        return {
            "shuffled": {
                "slow_half": tuple(result.pairs_shuffled(s).slow_half() for s in range(seeds))
            }
        }
    if analysis == "t5_biases":
        runs = [result.buckets_shuffled(s) for s in range(seeds)]
        return {"shuffled": {m: tuple(r[m] for r in runs) for m in ("local_mass", "decay")}}
    return {}


def spread(per_seed: Sequence[float]) -> Dict[str, Any]:
    """``{"mean", "std", "per_seed"}`` of figures over seeds (for the JSON)."""
    values = [float(x) for x in per_seed]
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "per_seed": values}


def _cell(value: float, noise: Mapping[str, Any], analysis: str, fmt: str) -> str:
    """``"value (a / b)"``: the figure, then each noise's mean in the order of
    :data:`NOISE` (``-`` where the model has none)."""
    text = format(value, fmt)
    kinds = NOISE.get(analysis, ())
    if not kinds or all(noise.get(k) is None for k, _ in kinds):
        return text
    shown = [
        "-" if noise.get(k) is None else format(float(np.mean(noise[k])), fmt) for k, _ in kinds
    ]
    return f"{text} ({' / '.join(shown)})"


def _title(analysis: str, title: str) -> str:
    kinds = NOISE.get(analysis)
    if not kinds:
        return f"{title}, side by side (no noise baseline: see the guide):"
    return f"{title}, side by side (noise: {' / '.join(name for _, name in kinds)}):"


def comparison_tables(models: Sequence[Model]) -> List[str]:
    """One Markdown table per analysis any of `models` has, a row per model
    that has it, each figure followed by its noise's mean over the seeds."""
    out = []
    for analysis in ANALYSES:
        rows = _with(models, analysis)
        if rows:
            out.append(_TABLES[analysis](rows))
    return out


def _with(results: Sequence[Model], analysis: str) -> List[Tuple[str, Any, Any]]:
    return [(name, r[analysis], noise) for name, r, noise in results if analysis in r]


def _markdown(
    analysis: str, title: str, columns: Sequence[str], align: str, body: Iterable[Sequence[str]]
) -> str:
    """The table of `analysis`: its title (:func:`_title`), a header of
    `columns` aligned by `align` (a letter a column: ``l`` left, ``r``
    right), then a row of cells for each item of `body`."""
    lines = [
        _title(analysis, title),
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "".join("---:|" if a == "r" else "---|" for a in align),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def _layer_probe(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    def at(r: Any, i: int) -> str:
        per = {k: a[:, i] for k, a in r.baselines.items()}
        return _cell(float(r.mae[i]), per, "layer_probe", ".2f")

    def cells(name: str, r: Any) -> List[str]:
        last, best = len(r.mae) - 1, int(np.argmin(r.mae))
        return [name, f"{r.n_tokens}", f"{last}", at(r, 0), at(r, last), f"{at(r, best)} ({best})"]

    return _markdown(
        "layer_probe",
        "Position through the layers (absolute MAE)",
        ["model", "tokens", "layers", "embeddings (layer 0)", "last layer", "lowest (its layer)"],
        "lrrrrr",
        (cells(name, r) for name, r, _ in rows),
    )


def _skip(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    ks = sorted({k for _, r, _ in rows for k in r.perplexity})

    def at(r: Any, k: int) -> str:
        if k not in r.perplexity:
            return "-"
        per = {kind: by_k.get(k) for kind, by_k in r.baselines.items()}
        return _cell(r.perplexity[k], per, "skip_perplexity", ".3f")

    def cells(name: str, r: Any) -> List[str]:
        what = "pseudo-perplexity" if r.pseudo else "perplexity"
        return [name, what, f"{r.n_tokens}", *(at(r, k) for k in ks)]

    return _markdown(
        "skip_perplexity",
        "Skip-position attack (position ids s + i*k)",
        ["model", "measure", "tokens", *(f"k = {k}" for k in ks)],
        "llr" + "r" * len(ks),
        (cells(name, r) for name, r, _ in rows),
    )


def _rope_usage(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    def cells(name: str, r: Any, noise: Any) -> List[str]:
        z = {k: f.get("slow_half") for k, f in noise.get("rope_usage", {}).items()}
        slowest = float(r.share().mean(axis=(0, 1))[-1])
        shape = " x ".join(str(n) for n in r.usage.shape)
        return [name, shape, _cell(r.slow_half(), z, "rope_usage", ".3f"), f"{slowest:.3f}"]

    return _markdown(
        "rope_usage",
        "RoPE frequency usage from q_proj weights (slowest half's share)",
        ["model", "layers x heads x pairs", "slowest half", "slowest pair"],
        "llrr",
        (cells(*row) for row in rows),
    )


def _rope_activations(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    def at(r: Any, what: str) -> str:
        z = {k: f.get(what) for k, f in r.baselines.items()}
        return _cell(getattr(r, what).slow_half(), z, "rope_activations", ".3f")

    return _markdown(
        "rope_activations",
        "RoPE frequency usage from activations (slowest half's share)",
        ["model", "texts", "tokens", "queries", "keys"],
        "lrrrr",
        (
            [name, f"{r.n_texts}", f"{r.n_tokens}", at(r, "queries"), at(r, "keys")]
            for name, r, _ in rows
        ),
    )


def _shares(analysis: str, title: str) -> Any:
    def table(rows: Sequence[Tuple[str, Any, Any]]) -> str:
        terms: List[str] = []
        for _, r, _ in rows:
            terms += [t for t in r.terms if t not in terms]

        def cells(name: str, r: Any) -> List[str]:
            share = dict(zip(r.terms, r.share.mean(axis=(0, 1))))
            layers, heads = r.share.shape[:2]
            shown = [f"{share[t]:.3f}" if t in share else "-" for t in terms]
            return [name, f"{layers} x {heads}", f"{len(r.n_tokens)}", *shown]

        return _markdown(
            analysis,
            title,
            ["model", "layers x heads", "texts", *terms],
            "llr" + "r" * len(terms),
            (cells(name, r) for name, r, _ in rows),
        )

    return table


def _t5(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    kinds = ("local", "backward", "forward", "global")

    def cells(name: str, r: Any, noise: Any) -> List[str]:
        z = noise.get("t5_biases", {})
        mean = {"local_mass": float(r.local_mass.mean()), "decay": float(r.decay.mean())}
        shown = [
            _cell(mean[m], {k: f.get(m) for k, f in z.items()}, "t5_biases", fmt)
            for m, fmt in (("local_mass", ".3f"), ("decay", "+.3f"))
        ]
        counts = [str(int((r.head_type == t).sum())) for t in kinds]
        return [name, f"{len(r.layers)} x {r.bias.shape[1]}", *shown, *counts]

    return _markdown(
        "t5_biases",
        "T5 bucket biases (mean over attentions and heads)",
        ["model", "attentions x heads", "local mass", "decay", *kinds],
        "llrrrrrr",
        (cells(*row) for row in rows),
    )


def _alibi(rows: Sequence[Tuple[str, Any, Any]]) -> str:
    def cells(name: str, r: Any) -> List[str]:
        slopes = f"{float(r.slopes.min()):.3g} to {float(r.slopes.max()):.3g}"
        windows = f"{int(r.windows.min())} to {int(r.windows.max())}"
        return [name, f"{len(r.slopes)}", slopes, f"{windows} ({float(np.median(r.windows)):g})"]

    return _markdown(
        "alibi",
        "ALiBi windows",
        ["model", "heads", "slopes", "windows (median)"],
        "lrll",
        (cells(name, r) for name, r, _ in rows),
    )


_TABLES: Dict[str, Any] = {
    "layer_probe": _layer_probe,
    "skip_perplexity": _skip,
    "rope_usage": _rope_usage,
    "rope_activations": _rope_activations,
    "rope_logits": _shares("rope_logits", "RoPE: the positional part of the logits (share)"),
    "relative_share": _shares("relative_share", "Relative terms' share of the logits"),
    "t5_biases": _t5,
    "alibi": _alibi,
}


# ---------------------------------------------------------------- the figures


def plot_analysis(
    analysis: str, models: Sequence[Model], path: Optional[PathLike] = None, *, dpi: float = 110
) -> Any:
    """One figure of `analysis` for every model that has it: a line per model
    (its noise dashed, in the model's colour, where it has one), or a panel
    per model for the T5 biases.  Without `path` the figure is returned;
    with one it is written there (its extension names the format) and
    `path` returned."""
    from ._plots import _figure

    rows = _with(models, analysis)
    if not rows:
        raise ValueError(f"analysis: no model has {analysis!r}")
    draw = _DRAW[analysis]
    size = (5.0 * len(rows), 4.0) if analysis == "t5_biases" else (11.0, 4.2)
    return _figure(path, dpi, size, lambda fig: draw(fig, rows))


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _draw_layer_probe(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    for i, (name, r, _) in enumerate(rows):
        layers = np.arange(len(r.mae))
        ax.errorbar(layers, r.mae, yerr=r.mae_std, marker="o", capsize=3, color=_colour(i),
                    label=name)  # fmt: skip
        for kind, style in (("random", ":"), ("shuffled", "--")):
            if kind in r.baselines:
                ax.plot(layers, r.baselines[kind].mean(axis=0), style, color=_colour(i))
    ax.set_xticks(range(max(len(r.mae) for _, r, _ in rows)))
    ax.set_xlabel("layer (0: embedding output)")
    ax.set_ylabel("absolute position MAE (positions)")
    ax.set_title("position through the layers (dotted: random table; dashed: ids shuffled)")
    ax.legend(fontsize=7)


def _draw_skip(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    for i, (name, r, _) in enumerate(rows):
        ks = sorted(r.perplexity)
        ax.plot(ks, [r.perplexity[k] for k in ks], "o-", color=_colour(i), label=name)
        for kind, style in (("random", ":"), ("shuffled", "--")):
            if kind in r.baselines:
                ax.plot(ks, [np.mean(r.baselines[kind][k]) for k in ks], style, color=_colour(i))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("skip factor k (position ids s + i*k)")
    ax.set_ylabel("(pseudo-)perplexity")
    ax.set_title("skip-position attack (dotted: random table; dashed: ids shuffled)")
    ax.legend(fontsize=7)


def _draw_usage(what: str) -> Any:
    def draw(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
        parts = ("queries", "keys") if what == "rope_activations" else (None,)
        for col, part in enumerate(parts):
            ax = fig.add_subplot(1, len(parts), col + 1)
            for i, (name, r, _) in enumerate(rows):
                usage = r if part is None else getattr(r, part)
                share = usage.share().mean(axis=(0, 1))
                ax.plot(np.arange(len(share)), share, "o-", color=_colour(i), label=name)
                ax.axhline(1 / len(share), color=_colour(i), linestyle="--", linewidth=0.7)
            ax.set_xlabel("rotary pair k (fast to slow)")
            ax.set_ylabel("share of the head's norm² (mean over layers, heads)")
            ax.set_title(f"{part or 'q_proj weight rows'} (dashed: an even share)", fontsize=9)
            ax.legend(fontsize=7)

    return draw


def _draw_shares(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    terms: List[str] = []
    for _, r, _ in rows:
        terms += [t for t in r.terms if t not in terms]
    width = 0.8 / len(rows)
    for i, (name, r, _) in enumerate(rows):
        share = dict(zip(r.terms, r.share.mean(axis=(0, 1))))
        x = np.arange(len(terms)) + i * width
        ax.bar(x, [share.get(t, 0.0) for t in terms], width, color=_colour(i), label=name)
    ax.set_xticks(np.arange(len(terms)) + 0.4 - width / 2)
    ax.set_xticklabels(terms)
    ax.set_ylabel("share of the logits' magnitude")
    ax.legend(fontsize=7)


def _draw_t5(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
    for col, (name, r, _) in enumerate(rows):
        ax = fig.add_subplot(1, len(rows), col + 1)
        for li, layer in enumerate(r.layers):
            for h in range(r.bias.shape[1]):
                ax.plot(r.distances, r.bias[li, h], color=_colour(li), linewidth=0.8,
                        label=layer if h == 0 else None)  # fmt: skip
        ax.axvline(0, color="grey", linewidth=0.6)
        ax.set_xlabel("distance key - query")
        ax.set_ylabel("bias")
        ax.set_title(f"{name}: a line per head", fontsize=9)
        ax.legend(fontsize=7)


def _draw_alibi(fig: Any, rows: Sequence[Tuple[str, Any, Any]]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    for i, (name, r, _) in enumerate(rows):
        ax.plot(np.arange(len(r.windows)), r.windows, "o-", color=_colour(i), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("head")
    ax.set_ylabel("window (positions)")
    ax.legend(fontsize=7)


_DRAW: Dict[str, Any] = {
    "layer_probe": _draw_layer_probe,
    "skip_perplexity": _draw_skip,
    "rope_usage": _draw_usage("rope_usage"),
    "rope_activations": _draw_usage("rope_activations"),
    "rope_logits": _draw_shares,
    "relative_share": _draw_shares,
    "t5_biases": _draw_t5,
    "alibi": _draw_alibi,
}
