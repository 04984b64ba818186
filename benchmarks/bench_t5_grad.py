"""T5's backward pass: the table's gradient."""

from __future__ import annotations

import numpy as np
from common import Case, torch

from posenc import reference


def t5_grad_cases(quick):
    from posenc.bias import t5_bias_table_grad

    n_heads, n = (16, 512) if quick else (16, 1024)
    grad = np.random.default_rng(0).standard_normal((1, n_heads, n, n)).astype(np.float32)
    words = grad.reshape(-1).view(np.uint64)
    torch_grad = None
    try:
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        config = T5Config(d_model=16, d_kv=4, num_heads=n_heads, num_layers=1)
        attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
        weight = attention.relative_attention_bias.weight
        bias = attention.compute_bias(n, n)  # the graph of the forward, kept
        tgrad = torch.from_numpy(grad)

        def torch_grad():
            return torch.autograd.grad(bias, weight, tgrad, retain_graph=True)

    except ImportError:  # pragma: no cover - depends on the machine
        pass
    return [
        Case(
            name=f"t5_bias_table_grad((1, {n_heads}, {n}, {n}) float32, 32 buckets)",
            nbytes=grad.nbytes,
            posenc=lambda: t5_bias_table_grad(grad, 32),
            memory=lambda: np.max(words),
            numpy=lambda: reference.t5_bias_table_grad(grad, 32),
            torch=torch_grad if torch is not None else None,
            note="memory: one read of the gradient; numpy: np.add.at; "
            "torch: autograd through T5Attention.compute_bias (backward only)",
        )
    ]
