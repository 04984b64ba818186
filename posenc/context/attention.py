"""Attention by query-key distance, per layer and head, with and without a
scaling method: :func:`attention_by_distance`.

The model reads a text once per method with transformers' eager attention
(whose modules return their weights; the model's own implementation is
set back after), and a hook on each ``self_attn`` module reduces its
weights as they are made, one head at a time: for each distance
``d = i - j`` between a query ``i`` and a key ``j <= i``, the mean weight
over the queries that reach that far, and for each query position ``i``
the entropy (nats) of its weights over its ``i + 1`` keys.  What a method
changes shows here: a stretched rotation moves weight to farther keys,
YaRN's attention factor (its "temperature") sharpens every distribution,
lowering the entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, TypeVar

import numpy as np

from .._typing import PathLike
from . import _methods
from ._common import Plotted, Progress, evaluating, methods_of, token_ids, torch_module, vocab_size
from ._methods import NONE

if TYPE_CHECKING:
    pass

_PathT = TypeVar("_PathT", bound=PathLike)


@dataclass(frozen=True, repr=False)
class AttentionByDistance(Plotted):
    """Mean attention weight by query-key distance and entropy by query
    position, per method, layer and head: the result of
    :func:`attention_by_distance`.

    Attributes
    ----------
    methods : tuple of str
        The scaling methods, in the order they ran (``"none"``: as loaded).
    layers : tuple of str
        The attention modules, in the model's order.
    weight : ndarray of shape (n_methods, n_layers, n_heads, n)
        ``weight[m, l, h, d]``: the mean weight of a key ``d`` tokens
        before its query (``d = 0``: the query itself), over every query
        of every text that reaches that far.
    entropy : ndarray of shape (n_methods, n_layers, n_heads, n)
        ``entropy[m, l, h, i]``: the mean entropy (nats) of the weights of
        the query at position ``i`` (over ``i + 1`` keys), over the texts.
    count : ndarray of shape (n,)
        How many queries each distance's mean is over.
    n_tokens : tuple of int
        The tokens of each text.
    """

    methods: Tuple[str, ...]
    layers: Tuple[str, ...]
    weight: np.ndarray
    entropy: np.ndarray
    count: np.ndarray
    n_tokens: Tuple[int, ...]

    def __repr__(self) -> str:
        m, n_layers, heads, n = self.weight.shape
        return (
            f"AttentionByDistance({', '.join(self.methods)}; {n_layers} layers x {heads} heads, "
            f"distances 0..{n - 1})"
        )

    def mean_distance(self) -> np.ndarray:
        """``(n_methods, n_layers, n_heads)``: the mean distance attended,
        ``sum_d d * weight_sum(d)`` over the queries."""
        d = np.arange(self.weight.shape[-1])
        sums = self.weight * self.count  # each query's weights sum to 1
        return (sums * d).sum(axis=-1) / self.count[0]

    def mean_entropy(self) -> np.ndarray:
        """``(n_methods, n_layers, n_heads)``: the entropy over every query
        (each text's queries weighed alike)."""
        positions = self.count[0]  # queries: every text has one at distance 0 per token
        n = self.entropy.shape[-1]
        texts = np.array([sum(1 for t in self.n_tokens if t > i) for i in range(n)])
        return (self.entropy * texts).sum(axis=-1) / positions

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (``json.dumps`` takes them)."""
        return {
            "methods": list(self.methods),
            "layers": list(self.layers),
            "n_tokens": list(self.n_tokens),
            "count": self.count.astype(np.int64).tolist(),
            "weight": self.weight.tolist(),
            "entropy": self.entropy.tolist(),
            "mean_distance": self.mean_distance().tolist(),
            "mean_entropy": self.mean_entropy().tolist(),
        }

    def to_markdown(self) -> str:
        """A Markdown table: a row per layer, each method's mean entropy and
        mean distance attended (means over heads)."""
        heads = " | ".join(f"{m}: entropy | {m}: distance" for m in self.methods)
        lines = [
            f"Attention by distance ({sum(self.n_tokens)} tokens, means over heads):",
            "",
            f"| layer | {heads} |",
            "|---|" + "---:|---:|" * len(self.methods),
        ]
        ent, dist = self.mean_entropy().mean(axis=-1), self.mean_distance().mean(axis=-1)
        for k, name in enumerate(self.layers):
            cells = " | ".join(
                f"{ent[m, k]:.3f} | {dist[m, k]:.2f}" for m in range(len(self.methods))
            )
            lines.append(f"| {name} | {cells} |")
        return "\n".join(lines)

    _size = (11.0, 4.2)

    def _draw(self, fig: Any) -> None:
        """The mean weight by distance and the entropy by query position
        (means over layers and heads), a line per method."""
        ax1, ax2 = fig.subplots(1, 2)
        n = self.weight.shape[-1]
        for k, m in enumerate(self.methods):
            color = f"C{k % 10}"
            ax1.plot(np.arange(1, n), self.weight[k].mean(axis=(0, 1))[1:], color=color, label=m)
            ax2.plot(np.arange(n), self.entropy[k].mean(axis=(0, 1)), color=color, label=m)
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        ax1.set_xlabel("query-key distance")
        ax1.set_ylabel("mean attention weight")
        ax1.set_title("attention by distance (mean over layers and heads)", fontsize=10)
        ax2.plot(np.arange(n), np.log(np.arange(1, n + 1)), color="grey", ls=":", lw=0.8,
                 label="uniform")  # fmt: skip
        ax2.set_xlabel("query position")
        ax2.set_ylabel("entropy (nats)")
        ax2.set_title("entropy of each query's weights", fontsize=10)
        for ax in (ax1, ax2):
            ax.legend(fontsize=7)


def _texts(tokens: Any, vocab: Optional[int]) -> List[np.ndarray]:
    """One sequence of token ids, or several."""
    if isinstance(tokens, (list, tuple)) and tokens and not np.isscalar(tokens[0]):
        out = [token_ids(t, f"tokens[{i}]", vocab) for i, t in enumerate(tokens)]
    else:
        out = [token_ids(tokens, "tokens", vocab)]
    for i, t in enumerate(out):
        if t.size < 2:
            raise ValueError(f"tokens: text {i} has {t.size} tokens; give at least 2")
    return out


class _Sums:
    """The hooks' running sums for one method."""

    def __init__(self, torch: Any, layers: List[str], n: int) -> None:
        self.torch, self.n = torch, n
        self.index = {name: k for k, name in enumerate(layers)}
        self.weight: Optional[np.ndarray] = None
        self.entropy: Optional[np.ndarray] = None
        self.seen: set = set()

    def add(self, name: str, weights: Any) -> None:
        torch = self.torch
        w = weights.detach()[0]
        if w.dtype not in (torch.float32, torch.float64):
            w = w.float()
        heads, q, k = w.shape
        if q != k:
            raise ValueError(f"{name}: attention weights of {q} queries over {k} keys; posenc "
                             "reads a text in one pass, queries and keys alike")  # fmt: skip
        if self.weight is None:
            shape = (len(self.index), heads, self.n)
            self.weight, self.entropy = np.zeros(shape), np.zeros(shape)
        assert self.weight is not None and self.entropy is not None
        keep = torch.ones(q, q, dtype=torch.bool, device=w.device).tril()
        layer = self.index[name]
        for h in range(heads):
            flipped = torch.flip(w[h], dims=[1]).contiguous()
            # row i, column d: the weight of key i - d (garbage where d > i, masked)
            by_distance = flipped.as_strided((q, q), (q - 1, 1), q - 1) if q > 1 else flipped
            sums = torch.where(keep, by_distance, 0).sum(dim=0)
            ent = -torch.special.xlogy(w[h], w[h]).sum(dim=1)
            self.weight[layer, h, :q] += sums.double().cpu().numpy()
            self.entropy[layer, h, :q] += ent.double().cpu().numpy()
        self.seen.add(name)


def _attention_modules(model: Any) -> List[Tuple[str, Any]]:
    return [
        (name, m) for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == "self_attn"
    ]


def _run(model: Any, texts: List[np.ndarray], sums: _Sums, bar: Progress, label: str) -> None:
    torch = sums.torch
    setter = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if not callable(setter):
        raise ValueError(
            "attention_by_distance needs a transformers model (set_attn_implementation, "
            "to read eager attention's weights)"
        )
    hooks = []

    def hook_for(name: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if isinstance(output, tuple) and len(output) > 1:
                w = output[1]
                if hasattr(w, "ndim") and w.ndim == 4:
                    sums.add(name, w)

        return hook

    device = next(iter(model.parameters())).device
    setter("eager")
    try:
        for name, module in _attention_modules(model):
            hooks.append(module.register_forward_hook(hook_for(name)))
        with torch.no_grad(), evaluating(model):
            for ids in texts:
                model(input_ids=torch.as_tensor(ids, device=device)[None], use_cache=False)
                bar.step(f"{label}: attention")
    finally:
        for h in hooks:
            h.remove()
        if before is not None:
            setter(before)


def attention_by_distance(
    model: Any, tokens: Any, *, methods: Any = (NONE,), progress: bool = False
) -> AttentionByDistance:
    """Mean attention weight by query-key distance and entropy by query
    position, per layer and head, for each scaling method.

    Parameters
    ----------
    model : transformers causal LM
        A loaded model whose attention modules are named ``self_attn``
        (Llama, Mistral, Qwen2, Gemma, Phi-3, ...).
    tokens : sequence of int, or a list of them
        The text (or texts) read, each in one forward pass: the weights of
        a layer take ``heads * n * n`` floats while its hook reduces them.
    methods : sequence or dict
        The scaling methods (``"none"``: the model as loaded), as
        :func:`~posenc.context.compare` takes them: ``["none", "yarn:4"]``
        sets the attention with and without YaRN side by side.
    progress : bool
        A progress bar on stderr, when it is a terminal.

    Returns
    -------
    AttentionByDistance
    """
    torch = torch_module("attention_by_distance")
    chosen = methods_of(methods)
    texts = _texts(tokens, vocab_size(model))
    layers = [name for name, _ in _attention_modules(model)]
    if not layers:
        raise ValueError(
            f"attention_by_distance: {type(model).__name__} has no attention module named "
            "self_attn whose weights it could read"
        )
    # each method built and checked once, a bad one refused before anything runs
    ready = {label: _methods.prepared(model, method) for label, method in chosen.items()}
    n = max(t.size for t in texts)
    bar = Progress(len(chosen) * len(texts), progress)
    weights, entropies = [], []
    try:
        for label in chosen:
            sums = _Sums(torch, layers, n)
            with _methods.with_method(model, ready[label]) as run:
                _run(run, texts, sums, bar, label)
            missing = [name for name in layers if name not in sums.seen]
            if missing or sums.weight is None or sums.entropy is None:
                raise ValueError(
                    f"attention_by_distance: {missing[0] if missing else layers[0]} returned no "
                    "attention weights under eager attention"
                )
            weights.append(sums.weight)
            entropies.append(sums.entropy)
    finally:
        bar.close()
    count = np.zeros(n)
    per_position = np.zeros(n)
    for t in texts:
        count[: t.size] += np.arange(t.size, 0, -1)
        per_position[: t.size] += 1
    return AttentionByDistance(
        methods=tuple(chosen),
        layers=tuple(layers),
        weight=np.stack(weights) / count,
        entropy=np.stack(entropies) / per_position,
        count=count.astype(np.int64),
        n_tokens=tuple(int(t.size) for t in texts),
    )
