"""Helpers several probe modules share, as public names of this private
module: the cross-validation folds and the figures of each fold, the line
of an analysis's noise, the Hub's bounds on seconds, the rows of a table a
probe reads, a model's positions, token-id texts and a mean of attention
terms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .. import _validate as v
from .._typing import NDArray

if TYPE_CHECKING:
    from .offsets import PositionRule

# ---------------------------------------------------------------- folds

#: The folds of the paper's cross-validation, both probes' default.
FOLDS = 5


def check_folds(folds: int, n: int, what: str) -> int:
    """`folds` checked: an integer from 2 up to `n` (the number of `what`)."""
    folds = v.integer(folds, "folds", minimum=2)
    if folds > n:
        raise ValueError(f"folds must be <= the number of {what} ({n}), got {folds}")
    return folds


def fold_slices(n: int, folds: int) -> List[slice]:
    """Contiguous folds as scikit-learn's ``KFold(folds)`` (no shuffle) cuts
    them: the first ``n % folds`` folds one longer."""
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    stops = np.cumsum(sizes)
    return [slice(int(b - s), int(b)) for s, b in zip(sizes, stops)]


def train_mask(n: int, test: slice) -> NDArray[np.bool_]:
    """The rows of `n` outside the fold `test`: those a fold's model is fitted on."""
    mask = np.ones(n, dtype=bool)
    mask[test] = False
    return mask


def format_floats(values: NDArray[np.float64], fmt: str) -> str:
    """``[a, b, ...]``, each value in `fmt` (the per-fold figures of a result's repr)."""
    return "[" + ", ".join(format(float(x), fmt) for x in values) + "]"


def noise_line(what: str, seeds: int, names: Mapping[str, str], shown: Mapping[str, str]) -> str:
    """``"  noise (what, N seeds): name: figures; ..."``, the line under an
    analysis's figures: `what` (a template whose ``{}`` is the number of
    `seeds`) says what the figures of the noise measure, then for each kind
    of noise in `shown`, its name in `names` and its figures."""
    parts = "; ".join(f"{names[kind]}: {figures}" for kind, figures in shown.items())
    return f"  noise ({what.format(f'{seeds} seed' + ('s' if seeds > 1 else ''))}): {parts}."


# ---------------------------------------------------------------- the Hub's bounds

#: The largest timeout and deadline the Hub's reads take, in seconds.
MAX_TIMEOUT = 3600.0
MAX_DEADLINE = 86400.0


# ---------------------------------------------------------------- rows of a table


def rows_note(
    n: int, rule: PositionRule, cut: Optional[int], rows: Optional[slice]
) -> Tuple[int, int, str]:
    """``(start, stop, note)`` of the rows probed from an `n`-row table."""
    if rows is not None:
        start, stop, _ = rows.indices(n)
        if stop - start < 1:
            raise ValueError(f"rows {rows.start}:{rows.stop} select no row of a {n}-row table")
        return start, stop, f"rows {start}:{stop} of {n} (as asked)"
    start = rule.first_row
    stop = n if cut is None else min(n, start + cut)
    parts = []
    if start:
        parts.append(f"first {start} rows dropped ({rule.why})")
    if stop < n:
        parts.append(f"cut to {stop - start} of {n - start} rows (the paper's 512)")
    return start, stop, ", ".join(parts)


# ---------------------------------------------------------------- a model's positions


def first_id(model: Any) -> int:
    """The position id the model gives its first token (its config's rule)."""
    from .offsets import position_rule

    return position_rule(getattr(model, "config", None)).first_id


def max_positions(model: Any) -> Optional[int]:
    """The model's ``max_position_embeddings`` (or ``n_positions``), None without."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def most_tokens(model: Any, k: int) -> Optional[int]:
    """The most tokens whose ids ``s + i * k`` stay inside the model's positions."""
    limit = max_positions(model)
    return None if limit is None else max(0, (limit - 1 - first_id(model)) // k + 1)


# ---------------------------------------------------------------- texts and terms


def token_texts(texts: Any) -> List[np.ndarray]:
    """The token-id sequences: one sequence of ints, or a sequence of them."""
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be token ids (a sequence of ints, or of such sequences)")
    items = list(texts) if not hasattr(texts, "ndim") or texts.ndim > 1 else [texts]
    if items and np.ndim(items[0]) == 0:
        items = [items]
    out = []
    for i, item in enumerate(items):
        ids = np.asarray(item)
        if ids.ndim != 1 or ids.size < 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"texts[{i}] must be a 1-D sequence of at least 2 integer token ids")
        out.append(ids.astype(np.int64))
    if not out:
        raise ValueError("texts must hold at least one text")
    return out


def mean_abs(term: Any, causal: bool) -> np.ndarray:
    """``(heads,)``: mean |term| over the pairs of one text, ``term`` of shape (heads, n, n)."""
    t = term.detach().double().abs().cpu().numpy()
    if causal:
        n = t.shape[-1]
        keep = np.tril(np.ones((n, n), dtype=bool))
        return t[:, keep].mean(axis=-1)
    return t.reshape(t.shape[0], -1).mean(axis=-1)


# ---------------------------------------------------------------- a model's kind

#: The ``--analyses`` names that fit each kind of model.
APPLIES: Dict[str, str] = {
    "alibi": "alibi",
    "t5": "t5_biases",
    "relative": "relative_share",
    "rope": "rope_usage, rope_activations or rope_logits",
    "absolute": "paper, properties, toeplitz or locality",
}


def not_this_kind(kind: str, config: Any, where: str, wanted: str, analysis: str) -> ValueError:
    """The error of an `analysis` of `wanted` models run on a model of another
    `kind` (:func:`posenc.probe.model_kind` of its `config`), naming the
    analyses that fit it."""
    if isinstance(config, dict):
        model_type = config.get("model_type")
    else:
        model_type = getattr(config, "model_type", None)
    model_type = model_type or "unknown"
    return ValueError(
        f"{where}: {analysis} applies to {wanted} models; this one ({model_type}) is "
        f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} model: try --analyses {APPLIES[kind]}"
    )
