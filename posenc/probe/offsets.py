"""Where a model's positions start in its learned table, decided from its config.

Some families keep rows in their position table that are never a position:

- RoBERTa and the models built on its embeddings (XLM-R, CamemBERT, ...)
  number the positions of a text ``padding_idx + 1, padding_idx + 2, ...``
  (``padding_idx`` is the config's ``pad_token_id``): rows ``0 ..
  padding_idx`` are not positions, and the model's own position ids start at
  ``padding_idx + 1``;
- OPT, BART and the models built on their learned positions (mBART, BioGPT,
  XGLM, ...) add an offset of 2 inside their position embedding: rows 0 and 1
  are not positions, and the position ids a caller passes start at 0.

:func:`position_rule` says which, from the config's ``model_type`` and
``pad_token_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: Model types whose position ids start at ``padding_idx + 1`` (their
#: embeddings make them by ``create_position_ids_from_input_ids``), the table
#: indexed by the ids themselves.
PADDING_IDX_TYPES = frozenset(
    {
        "roberta",
        "roberta-prelayernorm",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "data2vec-text",
        "ibert",
        "longformer",
        "luke",
        "xmod",
        "lilt",
        "markuplm",
        "layoutlmv3",
        "bridgetower",
    }
)

#: The ``pad_token_id`` of a RoBERTa-family model whose
#: ``config.json`` leaves it out: its transformers config class's default.
PAD_DEFAULTS = {t: 0 if t in ("lilt", "markuplm") else 1 for t in PADDING_IDX_TYPES}

#: Model types whose learned position embedding adds 2 to the ids it is
#: given (``self.offset = 2``): ids from 0, table rows from 2.
OFFSET_TWO_TYPES = frozenset({"opt", "bart", "mbart", "mvp", "plbart", "biogpt", "xglm", "trocr"})


@dataclass(frozen=True)
class PositionRule:
    """How a model numbers its positions.

    Attributes
    ----------
    first_row : int
        The table row of position 0 (the rows before it are not positions).
    first_id : int
        The position id the model gives its first token (what it is passed as
        ``position_ids``): ``padding_idx + 1`` for RoBERTa's family, else 0.
    why : str
        The rule in words, for the report's line ("" when none applies).
    """

    first_row: int
    first_id: int
    why: str


def _config_value(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def position_rule(config: Any) -> PositionRule:
    """The :class:`PositionRule` of a model, from its config (a transformers
    config or the dict of ``config.json``; None or an empty dict: no rule).

    Raises
    ------
    ValueError
        A model of RoBERTa's family whose config gives a ``pad_token_id``
        that is not a non-negative integer (its positions cannot be placed);
        a ``config.json`` that leaves it out means its config class's
        default (:data:`PAD_DEFAULTS`), as transformers reads it.

    Examples
    --------
    >>> from posenc.probe.offsets import position_rule
    >>> position_rule({"model_type": "roberta", "pad_token_id": 1})
    PositionRule(first_row=2, first_id=2, why='roberta numbers positions from padding_idx + 1 = 2')
    >>> position_rule({"model_type": "opt", "pad_token_id": 1}).first_row
    2
    >>> position_rule({"model_type": "bert"}).first_row
    0
    >>> position_rule({"model_type": "xlm-roberta"}).first_row  # pad_token_id left out: 1
    2
    """
    model_type = _config_value(config, "model_type") if config is not None else None
    if not isinstance(model_type, str):
        return PositionRule(0, 0, "")
    if model_type in PADDING_IDX_TYPES:
        pad = _config_value(config, "pad_token_id")
        default = ""
        if isinstance(config, Mapping) and "pad_token_id" not in config:
            # config.json without it: transformers' config class fills its default
            pad = PAD_DEFAULTS[model_type]
            default = f" (pad_token_id {pad}, the default of {model_type}'s config)"
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise ValueError(
                f"a {model_type} model numbers its positions from pad_token_id + 1, but its "
                f"config gives pad_token_id={pad!r}; give the rows to probe (rows=START:STOP)"
            )
        return PositionRule(
            pad + 1,
            pad + 1,
            f"{model_type} numbers positions from padding_idx + 1 = {pad + 1}{default}",
        )
    if model_type in OFFSET_TWO_TYPES:
        return PositionRule(2, 0, f"{model_type}'s learned positions are offset by 2")
    return PositionRule(0, 0, "")


def parse_rows(text: str) -> slice:
    """``START:STOP`` (either may be left out) as a slice of rows.

    >>> parse_rows("2:514"), parse_rows(":512"), parse_rows("2:")
    (slice(2, 514, None), slice(None, 512, None), slice(2, None, None))
    """
    if not isinstance(text, str) or text.count(":") != 1:
        raise ValueError(f"rows must be START:STOP (e.g. 2:514 or :512), got {text!r}")
    parts: list = []
    for part in text.split(":"):
        part = part.strip()
        if not part:
            parts.append(None)
            continue
        try:
            value = int(part)
        except ValueError:
            raise ValueError(f"rows must be START:STOP of integers, got {text!r}") from None
        if value < 0:
            raise ValueError(f"rows must be START:STOP with START, STOP >= 0, got {text!r}")
        parts.append(value)
    start, stop = parts
    if start is not None and stop is not None and stop - start < 1:
        raise ValueError(f"rows {text!r} is empty (STOP must be above START)")
    return slice(start, stop)
