"""The adapters' records (posenc._records) and what the adapters import.

The torch and JAX adapters and the backward rules find the NumPy functions
through the registry that posenc._interop.accepts_tensors fills; none of them
imports a public module (which import posenc._interop themselves), but
posenc.rope_scaling, which stands in the core layer under them (it
imports nothing above it: tests/test_layers.py).
"""

import ast
import inspect
import pathlib

import pytest

import posenc
from posenc import _records

PACKAGE = pathlib.Path(posenc.__file__).parent
#: the private modules of the interop layer
BACKENDS = ["_torch.py", "_jax.py", "_grad.py", "_records.py", "_options.py", "_interop.py"]
#: posenc's public modules (a name without a leading underscore)
PUBLIC = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")} | {"probe"}


def _imported_modules(path):
    """Every posenc module that `path` imports, by name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x
                found.update(alias.name for alias in node.names)
            elif node.level == 1:  # from .x import y
                found.add(node.module.partition(".")[0])
            elif node.module and node.module.startswith("posenc"):
                parts = node.module.split(".")
                found.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("posenc."))
    return found


#: the public module in the core layer, which the adapters may import
CORE_PUBLIC = {"rope_scaling"}


@pytest.mark.parametrize("name", BACKENDS)
def test_no_backend_imports_a_public_module(name):
    assert PUBLIC >= {"rope", "bias", "relative", "sinusoid", "rope_scaling", "rope_tools"}
    assert not _imported_modules(PACKAGE / name) & (PUBLIC - CORE_PUBLIC)


def test_the_import_check_sees_every_spelling_of_an_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from . import _dtypes, rope as _rope\nfrom .bias import t5_bias\n"
        "import posenc.relative\nfrom posenc import sinusoid\n"
    )
    assert _imported_modules(source) == {"_dtypes", "rope", "bias", "relative", "sinusoid"}


def test_every_routed_function_has_one_record_and_is_registered():
    routed = {
        name for name in posenc.__all__ if hasattr(getattr(posenc, name), "__wrapped_numpy__")
    }
    assert routed, "no routed function found"
    beside = {r.name for r in _records.RECORDS.values() if r.beside is not None}
    assert set(_records.RECORDS) - beside == routed
    for name in routed:
        assert _records.function(name) is getattr(posenc, name).__wrapped_numpy__


def test_the_records_name_arguments_their_functions_take():
    for record in _records.RECORDS.values():
        parameters = inspect.signature(_records.function(record.name)).parameters
        named = (
            set(record.arrays)
            | set(record.sinks)
            | record.indexes
            | record.traced_scalars
            | record.float_scalars
            | set(record.differentiable)
        )
        assert named <= set(parameters), (record.name, named - set(parameters))
        assert set(record.differentiable) <= set(record.arrays) | set(record.sinks), record.name
