"""The lab: the same small Transformer trained with each position encoding,
and evaluated at and beyond its training length.

- :data:`ENCODINGS`, :func:`encoding`: the encodings by name, with their
  options and training-time position samplers (``"rope:yarn:4"``,
  ``"alibi+randomized"``);
- :class:`~posenc.lab.model.LabModel`: a pre-LN Transformer, decoder language
  model or encoder classifier, whose encoding plugs in where it acts (the
  input, q and k, the attention scores);
- :func:`~posenc.lab.train.run`: one encoding trained with one seed and
  evaluated (checkpoints, resume, data parallel under ``torchrun``);
- :func:`compare`: several encodings and seeds, one table and one figure
  (:class:`LabComparison`); the command line is ``posenc lab``;
- :mod:`posenc.lab.tasks`, :mod:`posenc.lab.data`: the length-generalization
  tasks, the texts and the classification sets they train on.

torch is imported when a model is built (``pip install "posenc[lab]"``).
"""

from typing import Any

from .compare import LabComparison, compare
from .encodings import ENCODINGS, SAMPLERS, Encoding, encoding

__all__ = ["ENCODINGS", "SAMPLERS", "Encoding", "LabComparison", "LabModel", "compare", "encoding"]


def __getattr__(name: str) -> Any:
    if name == "LabModel":  # imports torch
        from .model import LabModel

        return LabModel
    raise AttributeError(f"module 'posenc.lab' has no attribute {name!r}")
