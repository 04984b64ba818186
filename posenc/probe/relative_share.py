"""How much of a model's attention logits its positions make, on real text:
the terms of each layer's and head's logit, their mean magnitude and share,
averaged over several texts with the spread across them
(:func:`relative_share`, :class:`LogitShare`).

- DeBERTa-v2/v3 (He et al., ICLR 2021): the logit is
  ``c2c + c2p + p2c``: content-to-content ``q_i . k_j``, content-to-position
  ``q_i . k^r_{d(i,j)}`` and position-to-content ``k_j . q^r_{d(j,i)}``, each
  over ``sqrt(head_dim * 3)``; the terms are those the model's own
  ``disentangled_attention_bias`` adds, one at a time.
- XLNet (Yang et al., NeurIPS 2019): the logit is ``content + position
  (+ segment)``, Transformer-XL's ``(q_i + u) . k_j`` and
  ``(q_i + v) . r_{i-j}`` (and the segment term when token types are given),
  times ``1 / sqrt(head_dim)``.
- RoPE models (:func:`posenc.probe.rope_logit_share`): ``content`` is the
  logit the unrotated query and key would give, ``q_i . k_j / sqrt(d)``;
  ``position`` is what the rotation adds, ``q_i . (R_{j-i} - I) k_j / sqrt(d)``.

For each text, layer, head and term, ``mean_abs`` is the mean of ``|term|``
over the text's ``n x n`` query-key pairs (the causal half for a decoder);
the share is ``mean_abs`` over its sum across the terms.  The figures are
the mean over the texts, and ``share_std`` the standard deviation of the
share across them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .._typing import PathLike
from ._common import mean_abs, not_this_kind, token_texts


@dataclass(frozen=True)
class LogitShare:
    """Each term's share of the attention logits, per layer and head: the
    result of :func:`relative_share` and :func:`posenc.probe.rope_logit_share`.

    Attributes
    ----------
    name : str
    terms : tuple of str
        The terms' names (``("c2c", "c2p", "p2c")``, ``("content",
        "position")``, ...).
    mean_abs : ndarray of shape (texts, layers, heads, terms), float64
        The mean ``|term|`` over each text's query-key pairs.
    n_tokens : list of int
        The tokens of each text.
    """

    name: str
    terms: Tuple[str, ...]
    mean_abs: np.ndarray
    n_tokens: List[int]

    @property
    def share(self) -> np.ndarray:
        """``mean_abs`` over its sum across the terms, averaged over the
        texts: shape ``(layers, heads, terms)``."""
        return self._per_text_share().mean(axis=0)

    @property
    def share_std(self) -> np.ndarray:
        """The standard deviation of the share across the texts (0 for one)."""
        return self._per_text_share().std(axis=0)

    def _per_text_share(self) -> np.ndarray:
        total = self.mean_abs.sum(axis=-1, keepdims=True)
        return np.divide(self.mean_abs, total, out=np.zeros_like(self.mean_abs), where=total > 0)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values."""
        return {
            "name": self.name,
            "terms": list(self.terms),
            "n_texts": len(self.n_tokens),
            "n_tokens": list(self.n_tokens),
            "mean_abs": self.mean_abs.mean(axis=0).tolist(),
            "share": self.share.tolist(),
            "share_std": self.share_std.tolist(),
        }

    def summary(self) -> str:
        """One sentence: each term's share, averaged over layers and heads."""
        share = self.share.mean(axis=(0, 1))
        std = self.share_std.mean(axis=(0, 1))
        parts = ", ".join(
            f"{t} {100 * s:.1f}% (± {100 * e:.1f})" for t, s, e in zip(self.terms, share, std)
        )
        layers, heads = self.mean_abs.shape[1:3]
        return (
            f"Share of the attention logits' magnitude ({layers} layers x {heads} heads, "
            f"{len(self.n_tokens)} texts, {sum(self.n_tokens)} tokens; ± the spread over "
            f"texts): {parts}."
        )

    def to_markdown(self) -> str:
        """A Markdown table, a row per layer and head: each term's share
        (± its standard deviation over the texts)."""
        lines = [
            "| layer | head | " + " | ".join(self.terms) + " |",
            "|---:|---:|" + "---:|" * len(self.terms),
        ]
        share, std = self.share, self.share_std
        for layer in range(share.shape[0]):
            for h in range(share.shape[1]):
                cells = " | ".join(
                    f"{100 * s:.1f}% ± {100 * e:.1f}"
                    for s, e in zip(share[layer, h], std[layer, h])
                )
                lines.append(f"| {layer} | {h} | {cells} |")
        lines += ["", self.summary()]
        return "\n".join(lines)

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """A panel per term: its share as a heat map over layers (rows) and
        heads (columns).  Without `path` the Figure is returned; with one it
        is written in the format its extension names and `path` returned."""
        from ._plots import _figure

        layers, heads, n_terms = self.share.shape

        def draw(fig: Any) -> None:
            fig.suptitle(
                f"{self.name}: each term's share of the logit ({len(self.n_tokens)} texts)"
            )
            for t, term in enumerate(self.terms):
                ax = fig.add_subplot(1, n_terms, t + 1)
                im = ax.imshow(self.share[:, :, t], vmin=0, vmax=1, aspect="auto", cmap="viridis")
                ax.set_title(term)
                ax.set_xlabel("head")
                if t == 0:
                    ax.set_ylabel("layer")
            fig.colorbar(im, ax=fig.axes, shrink=0.8)

        return _figure(path, dpi, (4 * n_terms + 1, 1.5 + 0.4 * min(layers, 24)), draw)


def _model_type(model: Any) -> str:
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be a transformers model (it has no config)")
    return str(getattr(config, "model_type", ""))


def _run(
    model: Any,
    texts: List[np.ndarray],
    install: Callable[[List[Any]], Callable[[], None]],
    expected_layers: int,
    what: str,
    token_types: bool = False,
) -> List[np.ndarray]:
    torch = importlib.import_module("torch")
    per_text = []
    device = next(model.parameters()).device
    for ids in texts:
        captured: List[Any] = []
        undo = install(captured)
        try:
            with torch.no_grad():
                batch = torch.as_tensor(ids)[None].to(device)
                model(input_ids=batch)
        finally:
            undo()
        if len(captured) != expected_layers:
            raise ValueError(
                f"model: {len(captured)} {what} in a forward pass, not one per layer "
                f"({expected_layers}); its attention is not the one this analysis reads"
            )
        per_text.append(np.stack(captured))
    return per_text


#: What reading a model's attention takes (:func:`_deberta_install`,
#: :func:`_xlnet_install`): the function that wraps its attention modules
#: to append each call's row of term sizes to a list (it returns the undo),
#: the terms, the number of modules.
_Install = Tuple[Callable[[List[Any]], Callable[[], None]], Tuple[str, ...], int]


def _attention_modules(model: Any, name: str, kind: str) -> List[Any]:
    """The modules of `model` of class `name` (`kind`'s attention)."""
    modules = [m for m in model.modules() if type(m).__name__ == name]
    if not modules:
        raise ValueError(f"model: no {name} module ({kind})")
    return modules


def _wrap_each(
    modules: List[Any], method: str, wrap: Callable[[Any, Callable[..., Any]], Callable[..., Any]]
) -> Callable[[], None]:
    """Set `method` of each module to ``wrap(module, its method)`` (an
    attribute of the instance); the function that deletes them again."""
    for m in modules:
        setattr(m, method, wrap(m, getattr(m, method)))

    def undo() -> None:
        for m in modules:
            delattr(m, method)

    return undo


def _deberta_install(model: Any) -> _Install:
    torch = importlib.import_module("torch")
    modules = _attention_modules(model, "DisentangledSelfAttention", "DeBERTa-v2/v3")
    first = modules[0]
    if not getattr(first, "relative_attention", False):
        raise ValueError("model: its config has relative_attention false: no position terms")
    kinds = tuple(k for k in ("c2p", "p2c") if k in first.pos_att_type)
    terms = ("c2c",) + kinds

    def install(captured: List[Any]) -> Callable[[], None]:
        def wrap(module: Any, original: Callable[..., Any]) -> Callable[..., Any]:
            def capture(*args: Any) -> Any:
                # (query_layer, key_layer, relative_pos, rel_embeddings, scale_factor),
                # positional as transformers passes them, handed on as they came
                query_layer, key_layer, _, _, scale_factor = args
                heads = module.num_attention_heads
                scale = np.sqrt(query_layer.size(-1) * scale_factor)
                c2c = torch.bmm(query_layer, key_layer.transpose(-1, -2)).double() / scale
                row = [mean_abs(c2c.view(-1, heads, *c2c.shape[-2:])[0], False)]
                saved = module.pos_att_type
                try:
                    for kind in kinds:
                        module.pos_att_type = [kind]
                        term = original(*args)
                        row.append(mean_abs(term.view(-1, heads, *term.shape[-2:])[0], False))
                finally:
                    module.pos_att_type = saved
                captured.append(np.stack(row, axis=-1))
                return original(*args)

            return capture

        return _wrap_each(modules, "disentangled_attention_bias", wrap)

    return install, terms, len(modules)


def _xlnet_install(model: Any) -> _Install:
    torch = importlib.import_module("torch")
    modules = _attention_modules(model, "XLNetRelativeAttention", "XLNet")

    def install(captured: List[Any]) -> Callable[[], None]:
        def wrap(module: Any, original: Callable[..., Any]) -> Callable[..., Any]:
            def capture(
                q_head: Any, k_head_h: Any, v_head_h: Any, k_head_r: Any, *args: Any, **kwargs: Any
            ) -> Any:
                # (q_len, batch, heads, d): content and position terms as XLNet adds them
                ac = torch.einsum("ibnd,jbnd->bnij", q_head + module.r_w_bias, k_head_h)
                bd = torch.einsum("ibnd,jbnd->bnij", q_head + module.r_r_bias, k_head_r)
                bd = module.rel_shift_bnij(bd, klen=ac.shape[3])
                row = [
                    mean_abs(ac[0] * module.scale, False),
                    mean_abs(bd[0] * module.scale, False),
                ]
                captured.append(np.stack(row, axis=-1))
                return original(q_head, k_head_h, v_head_h, k_head_r, *args, **kwargs)

            return capture

        return _wrap_each(modules, "rel_attn_core", wrap)

    return install, ("content", "position"), len(modules)


def relative_share(model: Any, texts: Any, *, name: Optional[str] = None) -> LogitShare:
    """The share of each term of a relative-position model's attention
    logits, per layer and head, over several texts (see the module's
    docstring for the terms).

    Parameters
    ----------
    model : transformers DeBERTa-v2/v3 or XLNet model
        Any head on the base model (``DebertaV2Model``,
        ``DebertaV2ForMaskedLM``, ``XLNetLMHeadModel``, ...); run in eval
        mode, without gradients, one text at a time, with no token types.
    texts : sequence of int, or sequence of sequences of int
        One tokenised text or several (each at least 2 tokens).
    name : str, optional
        What to call the model in the output (default: its class).

    Raises
    ------
    ValueError
        A model of another kind (naming the analyses that fit it), DeBERTa
        v1 (its attention is not read), or a text shorter than 2 tokens.

    Examples
    --------
    >>> from transformers import DebertaV2Config, DebertaV2Model
    >>> from posenc.probe import relative_share
    >>> deberta = DebertaV2Model(DebertaV2Config(
    ...     vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    ...     intermediate_size=32, relative_attention=True, pos_att_type=["c2p", "p2c"],
    ...     max_relative_positions=16, position_buckets=8)).eval()
    >>> r = relative_share(deberta, [list(range(10)), list(range(5, 20))])
    >>> r.terms, r.share.shape  # (layers, heads, terms)
    (('c2c', 'c2p', 'p2c'), (2, 2, 3))
    """
    from .biases import model_kind

    model_type = _model_type(model)
    if model_type == "deberta-v2":
        install, terms, layers = _deberta_install(model)
    elif model_type == "xlnet":
        install, terms, layers = _xlnet_install(model)
    elif model_type == "deberta":
        raise ValueError(
            "model: DeBERTa v1's attention (in_proj) is not read; relative_share reads "
            "DeBERTa-v2/v3 and XLNet"
        )
    else:
        raise not_this_kind(
            model_kind(model.config),
            model.config,
            type(model).__name__,
            "relative (DeBERTa-v2/v3, XLNet)",
            "relative_share",
        )
    ids = token_texts(texts)
    per_text = _run(model, ids, install, layers, "attention calls")
    return LogitShare(
        name or type(model).__name__, terms, np.stack(per_text), [int(t.size) for t in ids]
    )
