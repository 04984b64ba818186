"""The skip-position attack of Wang & Chen (2020) through a real forward
pass: the perplexity of a language model on a text whose position ids are
``i * k`` (:func:`skip_position_perplexity`), and the absolute-position probe
on each layer's hidden states (:func:`layer_position_probe`).

Both take ``baselines=b``: the same measure, for seeds ``0 .. b-1``, on the
model with its positions made noise, in two ways (:data:`FORWARD_KINDS`):

- ``"random"``: every learned position table of the model (an embedding
  named ``wpe``, ``position_embeddings`` or ``embed_positions``) replaced by
  :func:`posenc.probe.baselines.null_table` of it, ``"random"`` kind, for the
  seed (Gaussian rows, each scaled to the norm of the table's row), for the
  run only; a model without such a table (RoPE, T5) has none;
- ``"shuffled"``: the model's own position ids in the order of
  ``numpy.random.default_rng([seed, 1]).permutation(n)`` (the same positions,
  their order forgotten; for the skip attack, ``s + k * perm``); a model
  whose forward takes no ``position_ids`` has none.

Whatever survives them is what the model knows of position without its
position code: a causal mask, for one, tells a token how many came before it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import _validate as v
from ._common import first_id, max_positions, most_tokens, noise_line

#: The kinds of noise a forward pass is run with, and what the report calls them.
FORWARD_KINDS: Dict[str, str] = {
    "random": "random table, row norms kept",
    "shuffled": "position ids shuffled",
}

#: The names a learned position table goes by in transformers' models.
_TABLE_NAMES = ("wpe", "position_embeddings", "embed_positions")


def position_tables(model: Any) -> List[Any]:
    """The model's learned absolute position tables: its ``torch.nn.Embedding``
    modules named ``wpe``, ``position_embeddings`` or ``embed_positions``
    (GPT-2; BERT's and RoBERTa's families; OPT, BART: one per stack)."""
    torch = importlib.import_module("torch")
    return [
        m
        for name, m in model.named_modules()
        if name.rsplit(".", 1)[-1] in _TABLE_NAMES and isinstance(m, torch.nn.Embedding)
    ]


def takes_position_ids(model: Any) -> bool:
    """Whether the model's forward takes ``position_ids``."""
    try:
        return "position_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def forward_kinds(model: Any) -> Tuple[str, ...]:
    """The kinds of :data:`FORWARD_KINDS` that apply to `model`."""
    out = []
    if position_tables(model):
        out.append("random")
    if takes_position_ids(model):
        out.append("shuffled")
    return tuple(out)


def shuffled_order(n: int, seed: int) -> np.ndarray:
    """The order of the ``"shuffled"`` kind for `seed`: a permutation of ``range(n)``."""
    return np.random.default_rng([seed, 1]).permutation(n)


@contextlib.contextmanager
def random_tables(model: Any, seed: int) -> Iterator[None]:
    """Within this context, each of :func:`position_tables` holds the
    ``"random"`` null table of its own for `seed`; restored after."""
    from .baselines import null_table

    torch = importlib.import_module("torch")
    tables = position_tables(model)
    saved = [t.weight.detach().clone() for t in tables]
    try:
        with torch.no_grad():
            for t in tables:
                E = t.weight.detach().double().cpu().numpy()
                noise = torch.from_numpy(null_table(E, "random", seed))
                t.weight.copy_(noise.to(dtype=t.weight.dtype, device=t.weight.device))
        yield
    finally:
        with torch.no_grad():
            for t, w in zip(tables, saved):
                t.weight.copy_(w)


def _checked_baselines(baselines: Any) -> int:
    return v.integer(baselines, "baselines", minimum=0)


def _spread(per_seed: Sequence[float]) -> Dict[str, Any]:
    values = [float(x) for x in per_seed]
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "per_seed": values}


@dataclass(frozen=True)
class SkipPerplexity:
    """Perplexity per skip factor: the result of :func:`skip_position_perplexity`.

    Attributes
    ----------
    perplexity : dict of int to float
        ``{k: perplexity with position ids s, s + k, s + 2k, ...}``, ``s``
        the model's own first position id (``padding_idx + 1`` for RoBERTa's
        family, else 0); ``k = 1`` is the model's own perplexity.
    pseudo : bool
        Whether these are pseudo-perplexities (a masked LM: each token
        masked in turn and predicted from the rest, Salazar et al. 2020).
    n_tokens : int
        The tokens of the text.
    first_id : int
        ``s``: the position id of the first token.
    baselines : dict
        ``{kind: {k: (perplexity for each seed, ...)}}``: the same
        perplexities with the positions made noise (the module's
        :data:`FORWARD_KINDS`), for seeds ``0 .. len - 1``; empty without.
    """

    perplexity: Dict[int, float]
    pseudo: bool
    n_tokens: int
    first_id: int = 0
    baselines: Dict[str, Dict[int, Tuple[float, ...]]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (the skip factors as keys)."""
        return {
            "perplexity": {str(k): p for k, p in self.perplexity.items()},
            "pseudo": self.pseudo,
            "n_tokens": self.n_tokens,
            "first_id": self.first_id,
            "baselines": {
                kind: {str(k): _spread(p) for k, p in by_k.items()}
                for kind, by_k in self.baselines.items()
            },
        }

    def noise_line(self) -> str:
        """The baselines in one line (empty without)."""
        if not self.baselines:
            return ""
        shown = {
            kind: ", ".join(f"k={k}: {np.mean(p):.3f} ± {np.std(p):.3f}" for k, p in by_k.items())
            for kind, by_k in self.baselines.items()
        }
        seeds = len(next(iter(next(iter(self.baselines.values())).values())))
        return noise_line("same measure, {}", seeds, FORWARD_KINDS, shown)

    def to_markdown(self) -> str:
        what = "pseudo-perplexity" if self.pseudo else "perplexity"
        lines = [f"| position ids | {what} |", "|---|---:|"]
        s = f"{self.first_id} + " if self.first_id else ""
        lines += [f"| {s}i * {k} | {p:.3f} |" for k, p in self.perplexity.items()]
        return "\n".join(lines)


def skip_position_perplexity(
    model: Any,
    input_ids: Any,
    *,
    ks: Sequence[int] = (1, 2, 4),
    mask_token_id: Optional[int] = None,
    baselines: int = 0,
) -> SkipPerplexity:
    """The paper's skip-position attack (its Table 4) on a transformers model.

    Parameters
    ----------
    model : transformers model with an LM head
        A causal LM (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...) or, with
        `mask_token_id`, a masked LM (``BertForMaskedLM``, ...); it must take
        ``position_ids``.  Run in eval mode, without gradients.
    input_ids : sequence of int or 1-D tensor
        The text, tokenised (at least 2 tokens).
    ks : sequence of int
        The skip factors: position ids ``i * k``.
    mask_token_id : int, optional
        For a masked LM: its mask token; the pseudo-perplexity is computed,
        each token masked in turn (one forward pass of ``n`` copies).
    baselines : int
        Also the perplexities with the positions made noise, for seeds
        ``0 .. baselines-1`` (the module's :data:`FORWARD_KINDS` that apply
        to the model): with its position tables random (row norms kept), and
        with the ids ``s + k * perm`` (the same positions in a seeded order).

    Returns
    -------
    SkipPerplexity

    Raises
    ------
    ValueError
        Fewer than 2 tokens, a `k` below 1, or position ids past the
        model's table (``(n - 1) * k >= max_position_embeddings``): shorten
        the text.

    Examples
    --------
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from posenc.probe import skip_position_perplexity
    >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64)).eval()
    >>> result = skip_position_perplexity(gpt2, [3, 14, 15, 9, 26, 5, 35, 8], ks=(1, 2, 4))
    >>> sorted(result.perplexity), result.pseudo  # position ids i * k for each k
    ([1, 2, 4], False)
    >>> bool(all(p > 1 for p in result.perplexity.values()))
    True
    """
    torch = importlib.import_module("torch")
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(-1)
    n = int(ids.numel())
    if n < 2:
        raise ValueError(f"input_ids must hold at least 2 tokens, got {n}")
    ks = [v.integer(k, "ks", minimum=1) for k in ks]
    if not ks:
        raise ValueError("ks must hold at least one skip factor")
    limit = max_positions(model)
    first = first_id(model)
    if limit is not None and first + (n - 1) * max(ks) >= limit:
        raise ValueError(
            f"input_ids: {n} tokens with k = {max(ks)} reach position id "
            f"{first + (n - 1) * max(ks)}, past the model's {limit} positions; give at most "
            f"{most_tokens(model, max(ks))} tokens"
        )
    baselines = _checked_baselines(baselines)
    device = next(model.parameters()).device
    ids = ids.to(device)
    steps = torch.arange(n, device=device)
    out = {k: _perplexity(model, ids, first + steps * k, mask_token_id) for k in ks}
    noise: Dict[str, Dict[int, Tuple[float, ...]]] = {}
    kinds = forward_kinds(model) if baselines else ()
    if "random" in kinds:
        runs: Dict[int, List[float]] = {k: [] for k in ks}
        for seed in range(baselines):
            with random_tables(model, seed):
                for k in ks:
                    runs[k].append(_perplexity(model, ids, first + steps * k, mask_token_id))
        noise["random"] = {k: tuple(p) for k, p in runs.items()}
    if "shuffled" in kinds:
        orders = [torch.as_tensor(shuffled_order(n, s), device=device) for s in range(baselines)]
        noise["shuffled"] = {
            k: tuple(_perplexity(model, ids, first + o * k, mask_token_id) for o in orders)
            for k in ks
        }
    return SkipPerplexity(out, mask_token_id is not None, n, first, noise)


def _perplexity(model: Any, ids: Any, positions: Any, mask_token_id: Optional[int]) -> float:
    """The perplexity of `ids` (a pseudo-perplexity with `mask_token_id`)
    with position ids `positions`."""
    torch = importlib.import_module("torch")
    n = int(ids.numel())
    with torch.no_grad():
        if mask_token_id is None:
            logits = model(input_ids=ids[None], position_ids=positions[None]).logits[0]
            logp = torch.log_softmax(logits[:-1].double(), dim=-1)
            nll = -logp[torch.arange(n - 1), ids[1:]].mean()
        else:
            masked = ids.repeat(n, 1)
            masked[torch.arange(n), torch.arange(n)] = int(mask_token_id)
            logits = model(
                input_ids=masked, position_ids=positions.repeat(n, 1)
            ).logits  # (n copies, n, vocab)
            logp = torch.log_softmax(logits[torch.arange(n), torch.arange(n)].double(), -1)
            nll = -logp[torch.arange(n), ids].mean()
    return math.exp(float(nll))


@dataclass(frozen=True)
class LayerPositionProbe:
    """Absolute position read from each layer's hidden states: the result of
    :func:`layer_position_probe`.

    Attributes
    ----------
    mae : ndarray of shape (n_layers + 1,)
        The linear probe's mean absolute error (in positions) on the
        embedding output (index 0) and after each layer, mean over seeds.
    mae_std : ndarray of shape (n_layers + 1,)
        Its standard deviation over the seeds.
    n_tokens : int
        The tokens of the text (the rows each probe sees).
    baselines : dict
        ``{kind: ndarray of shape (seeds, n_layers + 1)}``: the MAE per layer
        with the positions made noise (the module's :data:`FORWARD_KINDS`),
        row ``s`` for seed ``s`` (the noise's and the probe's); empty without.
    """

    mae: np.ndarray
    mae_std: np.ndarray
    n_tokens: int
    baselines: Dict[str, np.ndarray] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return {
            "mae": self.mae.tolist(),
            "mae_std": self.mae_std.tolist(),
            "n_tokens": self.n_tokens,
            "baselines": {
                kind: {
                    "mean": a.mean(axis=0).tolist(),
                    "std": a.std(axis=0).tolist(),
                    "per_seed": a.tolist(),
                }
                for kind, a in self.baselines.items()
            },
        }

    def noise_line(self) -> str:
        """The baselines' MAE per layer in one line (empty without)."""
        if not self.baselines:
            return ""
        shown = {
            kind: ", ".join(f"{m:.2f}" for m in a.mean(axis=0))
            for kind, a in self.baselines.items()
        }
        seeds = len(next(iter(self.baselines.values())))
        return noise_line("same measure, mean over {}", seeds, FORWARD_KINDS, shown)

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """The MAE per layer, with its spread over seeds."""

        from ._plots import _figure

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 1, 1)
            layers = np.arange(len(self.mae))
            ax.errorbar(layers, self.mae, yerr=self.mae_std, marker="o", capsize=3)
            for kind, a in self.baselines.items():
                ax.plot(layers, a.mean(axis=0), "--", label=f"noise: {FORWARD_KINDS[kind]}")
            if self.baselines:
                ax.legend(fontsize=7)
            ax.set_xlabel("layer (0: embedding output)")
            ax.set_ylabel("absolute position MAE (positions)")
            ax.set_title(f"position through the layers ({self.n_tokens} tokens)")

        return _figure(path, dpi, (6, 4), draw)


def layer_position_probe(
    model: Any, input_ids: Any, *, seeds: int = 3, baselines: int = 0
) -> LayerPositionProbe:
    """Wang & Chen's absolute-position probe applied to each layer's hidden
    states of a transformers model run on a text.

    Parameters
    ----------
    model : transformers model
        Any model that returns ``hidden_states`` with
        ``output_hidden_states=True`` (run in eval mode, without gradients).
    input_ids : sequence of int or 1-D tensor
        The text, tokenised: at least 5 tokens (the probe's 5 folds); its
        ``n`` hidden states per layer are the rows probed.
    seeds : int
        The probe runs with seeds ``0 .. seeds-1``.
    baselines : int
        Also the MAE per layer with the positions made noise, for seeds
        ``0 .. baselines-1`` (the module's :data:`FORWARD_KINDS` that apply
        to the model; for seed ``s`` one probe, of seed ``s``).

    Returns
    -------
    LayerPositionProbe

    Examples
    --------
    >>> from transformers import GPT2Config, GPT2Model
    >>> from posenc.probe import layer_position_probe
    >>> gpt2 = GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64)).eval()
    >>> probe = layer_position_probe(gpt2, list(range(40)), seeds=2)
    >>> probe.mae.shape  # the embedding output, then each of the 2 layers
    (3,)
    >>> probe.n_tokens
    40
    """
    from .analyses import absolute_position_regression

    torch = importlib.import_module("torch")
    seeds = v.integer(seeds, "seeds", minimum=1)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(-1)
    n = int(ids.numel())
    if n < 5:
        raise ValueError(f"input_ids must hold at least 5 tokens, got {n}")
    baselines = _checked_baselines(baselines)
    device = next(model.parameters()).device
    ids = ids.to(device)

    def states(positions: Any = None) -> List[np.ndarray]:
        kwargs = {} if positions is None else {"position_ids": positions[None]}
        with torch.no_grad():
            out = model(input_ids=ids[None], output_hidden_states=True, **kwargs)
        return [h[0].detach().double().cpu().numpy() for h in out.hidden_states]

    def maes(hidden: List[np.ndarray], seed: int) -> List[float]:
        return [absolute_position_regression(h, seed=seed).mae for h in hidden]

    own = states()
    table = np.array([maes(own, s) for s in range(seeds)]).T  # (layers, seeds)
    noise: Dict[str, np.ndarray] = {}
    kinds = forward_kinds(model) if baselines else ()
    if "random" in kinds:
        runs = []
        for seed in range(baselines):
            with random_tables(model, seed):
                runs.append(maes(states(), seed))
        noise["random"] = np.array(runs)
    if "shuffled" in kinds:
        first = first_id(model)
        noise["shuffled"] = np.array(
            [
                maes(states(first + torch.as_tensor(shuffled_order(n, s), device=device)), s)
                for s in range(baselines)
            ]
        )
    return LayerPositionProbe(table.mean(axis=1), table.std(axis=1), n, noise)
