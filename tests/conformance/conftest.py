"""Conformance tests compare posenc with transformers' own functions.

They need torch and transformers.  Where those are missing they are skipped,
except when POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it): then a missing
package is an error, so that the witness cannot silently drop out.
"""

import importlib
import types

import pytest
from optional import require  # the conformance tests import it from here


@pytest.fixture(scope="session")
def torch():
    return require("torch")


@pytest.fixture(scope="session")
def transformers():
    return require("transformers")


# what the RoPE conformance files take from transformers: its config classes
# by name, and key -> a module of transformers ("models.llama.modeling_llama")
# or a name in one ("module:NAME")
_HF_CONFIGS = (
    "DeepseekV3Config",
    "Gemma3TextConfig",
    "Gemma4TextConfig",
    "GPTNeoXConfig",
    "HunYuanDenseV1Config",
    "LlamaConfig",
    "Phi3Config",
    "Qwen2VLTextConfig",
)
_HF_MODULES = {
    "init_functions": "modeling_rope_utils:ROPE_INIT_FUNCTIONS",
    "deepseek": "models.deepseek_v3.modeling_deepseek_v3",
    "gemma3": "models.gemma3.modeling_gemma3",
    "gemma4": "models.gemma4.modeling_gemma4",
    "gptj": "models.gptj.modeling_gptj",
    "hunyuan": "models.hunyuan_v1_dense.modeling_hunyuan_v1_dense",
    "llama": "models.llama.modeling_llama",
    "llama4": "models.llama4.modeling_llama4",
    "neox": "models.gpt_neox.modeling_gpt_neox",
    "phi3": "models.phi3.modeling_phi3",
    "qwen2_vl": "models.qwen2_vl.modeling_qwen2_vl",
    "qwen2_5_vl": "models.qwen2_5_vl.modeling_qwen2_5_vl",
    "qwen3_vl": "models.qwen3_vl.modeling_qwen3_vl",
    "vision_utils": "vision_utils",
}


@pytest.fixture(scope="session")
def hf(torch, transformers):
    """torch, transformers (as ``t``), the config classes and the modelling
    modules the RoPE conformance files use, as attributes (a file with its
    own ``hf`` fixture uses that instead); transformers' logging set to
    errors only."""
    transformers.logging.set_verbosity_error()
    found = {name: getattr(transformers, name) for name in _HF_CONFIGS}
    for key, where in _HF_MODULES.items():
        path, _, name = where.partition(":")
        module = importlib.import_module(f"transformers.{path}")
        found[key] = getattr(module, name) if name else module
    return types.SimpleNamespace(torch=torch, t=transformers, **found)
