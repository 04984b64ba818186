"""The skip-position attack of Wang & Chen (2020) through a real forward
pass: the perplexity of a language model on a text whose position ids are
``i * k`` (:func:`skip_position_perplexity`).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np

from .. import _validate as v
from ._common import first_id, max_positions, most_tokens


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
    """

    perplexity: Dict[int, float]
    pseudo: bool
    n_tokens: int
    first_id: int = 0

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (the skip factors as keys)."""
        return {
            "perplexity": {str(k): p for k, p in self.perplexity.items()},
            "pseudo": self.pseudo,
            "n_tokens": self.n_tokens,
            "first_id": self.first_id,
        }

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
    >>> config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64)
    >>> gpt2 = GPT2LMHeadModel(config).eval()  # a tiny GPT-2 of random weights
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
    device = next(model.parameters()).device
    ids = ids.to(device)
    out: Dict[int, float] = {}
    with torch.no_grad():
        for k in ks:
            positions = first + torch.arange(n, device=device) * k
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
            out[k] = math.exp(float(nll))
    return SkipPerplexity(out, mask_token_id is not None, n, first)


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
    """

    mae: np.ndarray
    mae_std: np.ndarray
    n_tokens: int

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return {
            "mae": self.mae.tolist(),
            "mae_std": self.mae_std.tolist(),
            "n_tokens": self.n_tokens,
        }

    def plot(self, path: Optional[Any] = None, *, dpi: float = 110) -> Any:
        """The MAE per layer, with its spread over seeds."""

        from ._plots import _figure

        def draw(fig: Any) -> None:
            ax = fig.add_subplot(1, 1, 1)
            layers = np.arange(len(self.mae))
            ax.errorbar(layers, self.mae, yerr=self.mae_std, marker="o", capsize=3)
            ax.set_xlabel("layer (0: embedding output)")
            ax.set_ylabel("absolute position MAE (positions)")
            ax.set_title(f"position through the layers ({self.n_tokens} tokens)")

        return _figure(path, dpi, (6, 4), draw)


def layer_position_probe(model: Any, input_ids: Any, *, seeds: int = 3) -> LayerPositionProbe:
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

    Returns
    -------
    LayerPositionProbe

    Examples
    --------
    >>> from transformers import GPT2Config, GPT2Model
    >>> from posenc.probe import layer_position_probe
    >>> config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64)
    >>> gpt2 = GPT2Model(config).eval()  # a tiny GPT-2 of random weights
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
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=ids[None].to(device), output_hidden_states=True)
    states = [h[0].detach().double().cpu().numpy() for h in out.hidden_states]
    maes = np.array(
        [[absolute_position_regression(h, seed=s).mae for s in range(seeds)] for h in states]
    )
    return LayerPositionProbe(maes.mean(axis=1), maes.std(axis=1), n)
