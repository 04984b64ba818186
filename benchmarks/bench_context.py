"""posenc.context: the cost of a comparison against the model's own forward passes.

``context.compare(model, tokens, methods=..., lengths=[L], stride=S)`` runs,
for each method, the sliding-window evaluation of the text (one forward pass
per window, each token's loss, the loss by position), with the method
patched on the model and unpatched after (each method built and checked
once, before anything runs).  The ``torch`` column is the same forward passes
over the same windows by the model itself, transformers computing the loss
(``model(window, labels=window)``), each method's model loaded with that
scaling in its config.  ``torch / posenc`` is the share of the time that is
the model's: at least 0.95 means posenc's patching and bookkeeping add at
most 5%.

The methods are ``none`` and, where ``posenc.hf.patch`` takes ``scaling=``,
``linear:4`` and ``yarn:4``; the models are a tiny and a small Llama of
random weights, on the CPU.
"""

from __future__ import annotations

import copy
import inspect
import warnings

import numpy as np
from common import Case, have_transformers, torch

# (name, config overrides, length, stride, tokens (quick: half))
SIZES = (
    (
        "tiny Llama (hidden 64, 2 layers, vocab 1000)",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=1000,
        ),
        256,
        128,
        2048,
    ),
    (
        "small Llama (hidden 256, 4 layers, vocab 32000)",
        dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=688,
            vocab_size=32000,
        ),
        512,
        256,
        2048,
    ),
)

#: transformers' rope parameters of each method other than none, for the models that witness them
SCALINGS = {
    "linear:4": {"rope_type": "linear", "factor": 4.0},
    "yarn:4": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
}


def _methods():
    from posenc import hf

    takes_scaling = "scaling" in inspect.signature(hf.patch).parameters
    return ["none", *SCALINGS] if takes_scaling else ["none"]


def _twin(model, method):
    """The model loaded with `method`'s scaling in its config (the same weights)."""
    if method == "none":
        return model
    config = copy.deepcopy(model.config)
    config.rope_parameters = {**config.rope_parameters, **SCALINGS[method]}
    twin = type(model)(config).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def context_cases(quick):
    if not have_transformers():
        return []
    import transformers

    from posenc import context
    from posenc.context.perplexity import windows

    cases = []
    methods = _methods()
    for name, overrides, length, stride, n in SIZES:
        n = n // 2 if quick else n
        torch.manual_seed(0)
        config = transformers.LlamaConfig(max_position_embeddings=length, **overrides)
        model = transformers.LlamaForCausalLM(config).eval()
        ids = np.random.default_rng(0).integers(0, overrides["vocab_size"], n)
        tokens = torch.as_tensor(ids)
        spans = windows(n, length, stride)
        twins = [_twin(model, m) for m in methods]

        def ours(model=model, ids=ids, length=length, stride=stride):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the line saying what each method inferred
                context.compare(model, ids, methods=methods, lengths=[length], stride=stride)

        def theirs(twins=twins, tokens=tokens, spans=spans):
            with torch.no_grad():
                for twin in twins:
                    for begin, end, _ in spans:
                        window = tokens[begin:end][None]
                        twin(input_ids=window, labels=window, use_cache=False)

        cases.append(
            Case(
                name=f"context.compare({', '.join(methods)}), {name}, L={length}, stride "
                f"{stride}, {n} tokens",
                nbytes=int(sum(p.numel() * p.element_size() for p in model.parameters())),
                posenc=ours,
                torch=theirs,
                compiled=False,
                note="torch: the model's own forward passes over the same windows, its loss; "
                "torch/posenc >= 0.95 is at most 5% added",
            )
        )
    return cases
