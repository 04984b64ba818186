"""What has a position embedding learned?  The probes of Wang & Chen (2020).

The analyses are in :mod:`posenc.probe.analyses`; this package re-exports them.
"""

# Not in __all__ (as before): KNOWN_KEYS, and the private helpers the command line uses.
from .analyses import KNOWN_KEYS as KNOWN_KEYS
from .analyses import (
    PUBLISHED,
    AbsolutePositionResult,
    Informativeness,
    ProbeReport,
    PublishedRow,
    RelativeOrderResult,
    absolute_position_regression,
    cosine_similarity,
    informativeness,
    load_position_embeddings,
    relative_order_classification,
    report,
    rope_long_term_decay,
    skip_positions,
)
from .analyses import _load as _load
from .analyses import _table as _table
from .analyses import _to_numpy as _to_numpy

__all__ = [
    "PUBLISHED",
    "AbsolutePositionResult",
    "Informativeness",
    "ProbeReport",
    "PublishedRow",
    "RelativeOrderResult",
    "absolute_position_regression",
    "cosine_similarity",
    "informativeness",
    "load_position_embeddings",
    "relative_order_classification",
    "report",
    "rope_long_term_decay",
    "skip_positions",
]
