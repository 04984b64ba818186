"""posenc/relative.pyi, the types of posenc.relative that type checkers read
in place of relative.py: it must say what the module does.

The witnesses are the module itself at run time (``inspect.signature`` of
each public function, the names it holds) and the source of
posenc._grad (which reads nothing from posenc.relative); the stub is
read with ``ast``.  ``python -m mypy.stubtest posenc.relative`` checks the
same and more where mypy is installed; here it is checked on every run.
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

from posenc import _grad
from posenc import relative as rel

STUB = Path(rel.__file__).with_suffix(".pyi")
TREE = ast.parse(STUB.read_text())


def public_functions():
    """The public functions posenc.relative defines (not those it imports)."""
    return sorted(
        name
        for name, obj in vars(rel).items()
        if not name.startswith("_")
        and inspect.isfunction(obj)
        and obj.__module__ == "posenc.relative"
    )


def stub_defs(name):
    return [n for n in TREE.body if isinstance(n, ast.FunctionDef) and n.name == name]


def declared_names():
    """Every name the stub binds at its top level: defs, assignments and
    the names its imports bind."""
    names = set()
    for node in TREE.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name for a in node.names)
    return names


def parameters(node):
    """(name, kind, default as source or None) of a def's parameters."""
    args = node.args
    found = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    kinds = ["POSITIONAL_ONLY"] * len(args.posonlyargs) + ["POSITIONAL_OR_KEYWORD"] * len(args.args)
    for a, kind, d in zip(positional, kinds, defaults):
        found.append((a.arg, kind, None if d is None else ast.literal_eval(d)))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        found.append((a.arg, "KEYWORD_ONLY", None if d is None else ast.literal_eval(d)))
    return found


def test_the_module_has_its_twelve_public_functions():
    names = public_functions()
    assert len(names) == 12, names
    assert "xl_position_term" in names and "tupe_bias" in names


@pytest.mark.parametrize("name", public_functions())
def test_each_public_function_is_in_the_stub_with_its_parameters(name):
    nodes = stub_defs(name)
    assert nodes, f"{name} is missing from {STUB.name}"
    # the run-time signature, with the device= the torch/JAX routing adds
    signature = inspect.signature(getattr(rel, name))
    want = [
        (p.name, p.kind.name, None if p.default is inspect.Parameter.empty else p.default)
        for p in signature.parameters.values()
    ]
    for node in nodes:
        assert parameters(node) == want, f"{name} (stub line {node.lineno})"
        args = node.args
        unannotated = [a.arg for a in args.args + args.kwonlyargs if a.annotation is None]
        assert unannotated == [] and node.returns is not None, f"{name} (line {node.lineno})"
    if len(nodes) > 1:  # overloads: each marked, the last one taking any array-like
        assert all(ast.unparse(d) == "overload" for n in nodes for d in n.decorator_list)
        first = nodes[-1].args.args[0].annotation
        assert ast.unparse(first) == "ArrayLike", name


def test_the_stub_declares_no_private_helper_and_the_backward_reads_none_from_here():
    # what the backward shares with the forward is posenc._relative_terms':
    # posenc._grad imports it there and reads nothing from posenc.relative
    assert not [n for n in declared_names() if n.startswith("_")]
    source = inspect.getsource(_grad)
    assert "_relative_terms import" in source and "_relative_engine import" in source
    assert not re.search(r"\brelative\b\.|import relative\b|from \.relative\b", source)


def test_every_name_the_stub_declares_exists_at_run_time():
    typing_only = {"Any", "overload", "np"}
    typing_only |= {"Array", "ArrayLike", "ArrayT", "DTypeLike", "NDArray", "TensorT"}
    absent = [n for n in declared_names() - typing_only if not hasattr(rel, n)]
    assert not absent, absent
