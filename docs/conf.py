"""Sphinx configuration of posenc's documentation.

Build (warnings are errors, as in CI)::

    pip install -e ".[docs]"
    sphinx-build -W --keep-going -b html docs docs/_build/html

torch and transformers need not be installed: without torch, posenc.torch
is imported against autodoc's stand-in, and the API page comes out the same.

The guides are Markdown (MyST), so that their code blocks are the ```python
blocks that tests/conformance/test_readme.py runs, as it runs the README's.
The API reference is made from the docstrings (numpydoc); api.rst is written
here, at each build, from ``posenc.__all__`` and ``posenc.probe.__all__``, so
a public name cannot be left out of it.  The performance page's tables and
plots are made from a benchmark JSON by docs/make_performance.py, and the
guides' figures by posenc itself in docs/make_figures.py, both run here too
(into docs/_generated); the lab guide's published results are the copies
benchmarks/lab_results.py kept in docs/reports/lab_results/
(docs/make_lab_results.py puts them there).
"""

import glob
import importlib.util
import inspect
import os
import sys

from sphinx.util.inspect import stringify_signature

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if glob.glob(os.path.join(ROOT, "posenc", "_core*.so")) + glob.glob(
    os.path.join(ROOT, "posenc", "_core*.pyd")
):
    # this tree, built in place (python setup.py build_ext --inplace): the
    # pages describe the code beside them, not another installed copy
    sys.path.insert(0, ROOT)
import posenc  # noqa: E402  (else the installed package: pip install -e ".[docs]")
import posenc.context  # noqa: E402
import posenc.lab  # noqa: E402
import posenc.probe  # noqa: E402

project = "posenc"
author = "the posenc authors"
copyright = "the posenc authors"  # noqa: A001
release = version = posenc.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "reports"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
html_theme = "furo"  # code blocks scroll sideways, none clipped
html_title = f"posenc {release}"

# numpydoc: the sections as they are written; no per-docstring validation yet
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set = set()
autodoc_typehints = "none"  # the signatures in the docstrings' own words
autodoc_member_order = "bysource"
intersphinx_mapping = {}  # offline builds: no inventories fetched
# a method without a docstring of its own is left out rather than given its base's (torch's
# nn.Module.forward says only "Define the computation performed at every call"): the page is
# the same whether torch is installed or stands in below
autodoc_inherit_docstrings = False

# posenc.torch imports torch; where torch is not installed (pip install ".[docs]" alone),
# autodoc imports it against a stand-in torch, so that its page is the same as with torch
if importlib.util.find_spec("torch") is None:
    autodoc_mock_imports = ["torch"]


def _mocked_base_signature(app, what, name, obj, options, signature, return_annotation):
    """A class deriving from the stand-in ``nn.Module`` would be shown with the stand-in's
    ``(*args, **kwargs)``: its own ``__init__``'s signature is shown instead."""
    if what != "class" or not any(getattr(c, "__sphinx_mock__", False) for c in obj.__mro__[1:]):
        return None
    sig = inspect.signature(obj.__init__)
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # without self
    return stringify_signature(sig, show_annotation=False, show_return_annotation=False), None


def setup(app):
    app.connect("autodoc-process-signature", _mocked_base_signature)


# ------------------------------------------------------------ the API page


def _defined_in(module):
    """The public functions `module` defines, in the order it defines them."""
    return [
        name
        for name, fn in vars(module).items()
        if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == module.__name__
    ]


GROUPS = [
    ("Sinusoidal table", ["sinusoid"]),
    (
        "Rotary position embedding",
        [
            "apply_rope",
            "Rope",
            "rope_cos_sin",
            "rope_frequencies",
            "permute_rope_weight",
            "attention_temperature",
        ],
    ),
    # a module's names (also in posenc.__all__) under the module's own name
    (
        "Position ids: ``posenc.positions``",
        [
            "positions_from_cu_seqlens",
            "mrope_position_ids",
            "vision_position_ids",
            "randomized_position_ids",
            "pose_position_ids",
        ],
        "positions",
    ),
    (
        "Attention biases",
        [
            "alibi_slopes",
            "alibi_bias",
            "alibi_key_bias",
            "relative_position_bucket",
            "t5_bias",
            "relative_positions",
        ],
    ),
    (
        "Encodings since 2022",
        [
            "kerple_bias",
            "sandwich_bias",
            "fire_bias",
            "cope_bias",
            "complex_order_embedding",
            "irope_layers",
            "chunked_causal_mask",
        ],
    ),
    # every public function of posenc.relative, in the order it defines them
    ("Relative encodings", _defined_in(posenc.relative)),
    (
        "Configuration",
        ["show_config", "config", "simd_path", "set_num_threads", "get_num_threads"],
    ),
]
MODULES = {"positions", "probe", "reference", "__version__"}  # documented on their own


def _api_page():
    listed = [name for _, names, *_ in GROUPS for name in names]
    missing = sorted(set(posenc.__all__) - set(listed) - MODULES)
    unknown = sorted(set(listed) - set(posenc.__all__))
    if missing or unknown:
        raise RuntimeError(
            f"docs/conf.py GROUPS: posenc.__all__ names not listed {missing}, "
            f"listed names not in posenc.__all__ {unknown}"
        )
    out = [
        ".. This file is written by docs/conf.py at each build: edit GROUPS there.",
        "",
        "API reference",
        "=============",
        "",
        f"posenc {posenc.__version__}: every name of ``posenc.__all__`` and "
        "``posenc.probe.__all__``, from its docstring.",
        "",
        ".. contents:: On this page",
        "   :local:",
        "   :depth: 1",
        "",
    ]
    for title, names, *module in GROUPS:
        out += [title, "-" * len(title), ""]
        prefix = "posenc."
        if module:
            prefix += f"{module[0]}."
            out += [f".. automodule:: posenc.{module[0]}", "   :no-members:", ""]
        out += [f".. autofunction:: {prefix}{name}\n" for name in names]
    out += ["``posenc.probe``", "-" * 16, "", ".. automodule:: posenc.probe", "   :no-members:", ""]
    for name in posenc.probe.__all__:
        obj = getattr(posenc.probe, name)
        if isinstance(obj, type):
            out.append(f".. autoclass:: posenc.probe.{name}\n   :members:\n")
        elif callable(obj):
            out.append(f".. autofunction:: posenc.probe.{name}\n")
        else:
            out.append(f".. autodata:: posenc.probe.{name}\n   :no-value:\n")
    # the modules for models (torch imported by them, as by posenc.hf's patches)
    # the context measurements (torch and transformers imported when they run)
    out += ["``posenc.context``", "-" * 18, "", ".. automodule:: posenc.context"]
    out += ["   :no-members:", ""]
    for name in posenc.context.__all__:
        obj = getattr(posenc.context, name)
        if isinstance(obj, type):
            out.append(f".. autoclass:: posenc.context.{name}\n   :members:\n")
        elif callable(obj):
            out.append(f".. autofunction:: posenc.context.{name}\n")
        else:
            out.append(f".. autodata:: posenc.context.{name}\n   :no-value:\n")
    # the lab (torch imported when a model is built)
    out += ["``posenc.lab``", "-" * 14, "", ".. automodule:: posenc.lab", "   :no-members:", ""]
    for name in posenc.lab.__all__:
        if name == "LabModel":  # imported with torch: autodoc imports it (against the stand-in)
            out.append(f".. autoclass:: posenc.lab.{name}\n   :members:\n")
            continue
        obj = getattr(posenc.lab, name)
        if isinstance(obj, type):
            out.append(f".. autoclass:: posenc.lab.{name}\n   :members:\n")
        elif callable(obj):
            out.append(f".. autofunction:: posenc.lab.{name}\n")
        else:
            out.append(f".. autodata:: posenc.lab.{name}\n   :no-value:\n")
    for name in ("run", "TrainConfig"):
        kind = "autofunction" if name == "run" else "autoclass"
        out.append(f".. {kind}:: posenc.lab.train.{name}\n")
    out += ["``posenc.torch``", "-" * 16, "", ".. automodule:: posenc.torch", "   :members:", ""]
    out += ["``posenc.hf``", "-" * 13, "", ".. automodule:: posenc.hf", "   :members:", ""]
    out += ["``posenc.reference``", "-" * 20, "", ".. automodule:: posenc.reference", ""]
    text = "\n".join(out)
    path = os.path.join(HERE, "api.rst")
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if text != old:  # rewritten only when it changes, so rebuilds stay incremental
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


_api_page()

# ------------------------------------------------ the performance page's figures

sys.path.insert(0, HERE)
import make_context_report  # noqa: E402
import make_figures  # noqa: E402
import make_lab_results  # noqa: E402
import make_performance  # noqa: E402
import make_probe_report  # noqa: E402

make_performance.main([])
# the guides' figures, computed by posenc (RoPE's frequencies, the biases' heat maps)
make_figures.main([])
# the probe guide's side-by-side report of five tiny models, by posenc probe itself
make_probe_report.main([])
# the context guide's table and figure of a tiny Llama, by posenc context itself
make_context_report.main([])
# the lab guide's published results, as benchmarks/lab_results.py kept them (never trained here)
make_lab_results.main([])
