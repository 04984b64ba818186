"""What a context-extension method does to a loaded RoPE model, measured.

A scaling method is ``"none"`` (the model as loaded), a short string
(``"linear:4"``, ``"ntk:4"``, ``"dynamic:4"``, ``"yarn:4"``,
``"llama3:8"``), a rope dict (``{"rope_type": "yarn", "factor": 4.0}``) or
a transformers config, applied to the model instance for the length of a
measurement by ``posenc.hf.patch(model, scaling=method)`` and removed by
``posenc.hf.unpatch(model)`` after: several methods run in turn on one
instance, never a reload.

- :func:`perplexity_by_length`: sliding-window perplexity at each context
  length (Hugging Face's recipe, the stride configurable) and the loss by
  position in the window (:class:`PerplexityByLength`);
- :func:`passkey_retrieval`: a key hidden at each depth of filler text at
  each length, read back by greedy decoding (Mohtashami & Jaggi 2023, as
  YaRN's evaluation runs it; the prompt is :class:`PasskeyPrompt`'s);
- :func:`compare`: several methods on one model in one call, one table
  (method x length) and one figure (:class:`ContextComparison`);
- :func:`attention_by_distance`: per layer and head, the mean attention
  weight by query-key distance and the entropy of each query's weights,
  with and without a method (:class:`AttentionByDistance`);
- :func:`estimate_memory`: what a measurement at a length needs (weights,
  KV cache, logits, activations), set against :func:`free_memory`.

Each result has ``to_dict()``, ``to_markdown()`` and ``plot(path)``, as the
probes' have.  torch and transformers (and matplotlib for the plots) are
imported when used: ``pip install "posenc[context]"``; the command line is
``posenc context MODEL``.
"""

from ._memory import MemoryEstimate, estimate_memory, free_memory
from .attention import AttentionByDistance, attention_by_distance
from .compare import ContextComparison, compare
from .passkey import DEPTHS, PasskeyPrompt, PasskeyRetrieval, passkey_retrieval
from .perplexity import PerplexityByLength, perplexity_by_length

__all__ = [
    "DEPTHS",
    "AttentionByDistance",
    "ContextComparison",
    "MemoryEstimate",
    "PasskeyPrompt",
    "PasskeyRetrieval",
    "PerplexityByLength",
    "attention_by_distance",
    "compare",
    "estimate_memory",
    "free_memory",
    "passkey_retrieval",
    "perplexity_by_length",
]
