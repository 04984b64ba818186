"""What has a position embedding learned?  The probes of Wang & Chen (2020).

Wang & Chen, "What Do Position Embeddings Learn?  An Empirical Study of
Pre-Trained Language Model Positional Encoding" (EMNLP 2020), ask of a
position-embedding matrix ``E`` of shape ``(n_positions, dim)``:

- can a linear map read the absolute position back from ``E[p]``?
  (:func:`absolute_position_regression`, mean absolute error in positions);
- can a linear classifier tell the order of two positions from
  ``[E[i], E[j]]``?  (:func:`relative_order_classification`, error rate);
- how alike are the positions (:func:`cosine_similarity`), and how many
  directions carry the table (:func:`informativeness`)?

:func:`report` runs all of them over several seeds and sets the figures
beside the published ones (:data:`PUBLISHED`); :func:`load_position_embeddings`
finds the table in a checkpoint file or a model.  Two helpers come from the
same line of work: :func:`skip_positions` (the skip-position attack) and
:func:`rope_long_term_decay` (RoFormer's bound on the rotary inner product).
:func:`logit_decomposition` splits a BERT-family encoder's first-layer
attention logits into TUPE's four terms (word-word, word-position,
position-word, position-position).

The probes follow the published protocol exactly, so that a figure computed
here can be set beside the paper's: the linear models are scikit-learn's
(``LinearRegression``; ``LogisticRegression`` with its defaults), fitted in
float64.  scikit-learn and matplotlib are needed only by the probes and the
plot, and are imported when those run: ``pip install "posenc[probe]"``.

:func:`cosine_similarity` and :func:`report` build an ``n x n`` matrix and
take tables of at most :data:`MAX_POSITIONS` (8192) rows; probe a slice of a
taller one.

The modules: :mod:`.analyses` (the probes and their result classes),
:mod:`.report` (:func:`report`, :class:`ProbeReport`, its plot), :mod:`.attention`
(:func:`logit_decomposition`, :class:`LogitDecomposition`),
:mod:`.checkpoints` (the file formats and :func:`load_position_embeddings`),
:mod:`.hub` (a table from a model on the Hugging Face Hub, by name:
:class:`HubError`, :func:`paper_rows`), :mod:`.properties` (Wang et al.'s
monotonicity, translation invariance and symmetry: :func:`position_properties`;
Wennberg & Henter's Toeplitz share: :func:`toeplitz_fit`), :mod:`.rope_usage`
(the rotary frequencies a model uses: from its q/k weights,
:func:`rope_frequency_usage`, layer by layer from a checkpoint or the Hub,
:func:`rope_frequency_usage_from_checkpoint`, from forward passes over
texts, :func:`rope_activation_usage`; the positional part of the logits,
:func:`rope_logit_share`), :mod:`.biases` (ALiBi's slopes and windows:
:func:`alibi_windows`, with the spread measured on texts by
:func:`alibi_logit_spread`; T5's bucket biases per layer and head:
:func:`t5_bucket_biases`; :func:`model_kind`), :mod:`.relative_share`
(DeBERTa's and XLNet's position terms' share of the logits:
:func:`relative_share`, :class:`LogitShare`),
:mod:`.locality` (Chen et al.'s locality and symmetry of the attention
positions alone give: :func:`attention_locality_symmetry`,
:func:`position_attention`),
:mod:`.forward` (the skip-position attack through a model:
:func:`skip_position_perplexity`; position through the layers:
:func:`layer_position_probe`; both with their noise, the model run with
its position table random and its position ids shuffled),
:mod:`.compare` (several models side by side: a table and a figure per
analysis of a model);
every public name is here.
"""

# KNOWN_KEYS is public but not in __all__ (as before the split); the private
# names are the helpers the command line (posenc.__main__) uses.
from ._plots import _plot_format as _plot_format
from ._tables import _table as _table
from ._tables import _to_numpy as _to_numpy
from ._tables import _TooManyPositions as _TooManyPositions
from .analyses import (
    MAX_POSITIONS,
    AbsolutePositionResult,
    Informativeness,
    RelativeOrderResult,
    absolute_position_regression,
    cosine_similarity,
    informativeness,
    relative_order_classification,
    rope_long_term_decay,
    skip_positions,
)
from .attention import TERMS, LogitDecomposition, logit_decomposition
from .biases import (
    HEAD_TYPES,
    AlibiWindows,
    T5BucketBiases,
    alibi_logit_spread,
    alibi_windows,
    model_kind,
    t5_bucket_biases,
)
from .checkpoints import KNOWN_KEYS as KNOWN_KEYS
from .checkpoints import load_position_embeddings
from .forward import (
    LayerPositionProbe,
    SkipPerplexity,
    layer_position_probe,
    skip_position_perplexity,
)
from .hub import PAPER_PROTOCOL, HubError, paper_rows
from .locality import (
    SYMMETRY_TOLERANCE,
    LocalitySymmetry,
    attention_locality_symmetry,
    position_attention,
)
from .properties import PositionProperties, ToeplitzFit, position_properties, toeplitz_fit
from .relative_share import LogitShare, relative_share
from .report import EXTRAS, PUBLISHED, ProbeReport, PublishedRow, plot_reports, report
from .rope_usage import (
    RopeActivationUsage,
    RopeFrequencyUsage,
    rope_activation_usage,
    rope_frequency_usage,
    rope_frequency_usage_from_checkpoint,
    rope_logit_share,
)

__all__ = [
    "AlibiWindows",
    "EXTRAS",
    "HEAD_TYPES",
    "HubError",
    "LocalitySymmetry",
    "MAX_POSITIONS",
    "PAPER_PROTOCOL",
    "PUBLISHED",
    "PositionProperties",
    "AbsolutePositionResult",
    "Informativeness",
    "LayerPositionProbe",
    "LogitDecomposition",
    "LogitShare",
    "ProbeReport",
    "PublishedRow",
    "RelativeOrderResult",
    "RopeActivationUsage",
    "RopeFrequencyUsage",
    "SYMMETRY_TOLERANCE",
    "SkipPerplexity",
    "T5BucketBiases",
    "TERMS",
    "ToeplitzFit",
    "absolute_position_regression",
    "alibi_logit_spread",
    "alibi_windows",
    "attention_locality_symmetry",
    "cosine_similarity",
    "informativeness",
    "load_position_embeddings",
    "layer_position_probe",
    "logit_decomposition",
    "model_kind",
    "paper_rows",
    "plot_reports",
    "position_attention",
    "position_properties",
    "relative_order_classification",
    "relative_share",
    "report",
    "rope_activation_usage",
    "rope_frequency_usage",
    "rope_frequency_usage_from_checkpoint",
    "rope_logit_share",
    "rope_long_term_decay",
    "skip_position_perplexity",
    "skip_positions",
    "t5_bucket_biases",
    "toeplitz_fit",
]
