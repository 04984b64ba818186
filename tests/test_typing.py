"""The type information posenc ships: every public function is annotated
(its own signature, or each of its overloads) with annotations that resolve
at run time on every Python posenc supports, and the installed package holds
the py.typed marker and the stub of its C extension.

What the annotations say is checked by mypy on tests/typing_usage.py (in
.ci/run); here, that they are there, complete and resolvable.  The witnesses:
the modules' source read with ``ast`` and ``inspect.signature``.
"""

import ast
import importlib.resources
import inspect
import os
import sys
import typing

import pytest

import posenc
from posenc import probe

SOURCE_READABLE = all(
    getattr(sys.modules[m], "__file__", "").endswith(".py")
    for m in ("posenc.rope", "posenc.probe.report")
)


def public_functions():
    """(qualified name, function) of every public callable: posenc.__all__,
    posenc.probe.__all__, and the public methods of the probe's classes."""
    found = []
    for module in (posenc, probe):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                found.append((f"{module.__name__}.{name}", obj))
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if inspect.isfunction(member) and not attr.startswith("_"):
                        found.append((f"{module.__name__}.{name}.{attr}", member))
    return found


FUNCTIONS = public_functions()


@pytest.mark.parametrize("module", [posenc, probe], ids=lambda m: m.__name__)
def test_all_names_each_public_object_once(module):
    names = list(module.__all__)
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    assert all(hasattr(module, name) for name in names)


def typed_dict_name(unpack):
    """T of ``Unpack[T]`` or ``Unpack[T[ArrayT]]``."""
    inner = unpack.slice
    return inner.value.id if isinstance(inner, ast.Subscript) else inner.id


def class_name(base):
    """C of a base class ``C`` or ``C[ArrayT]``."""
    return getattr(base.value if isinstance(base, ast.Subscript) else base, "id", None)


def stub_typed_dicts(tree):
    """The keys of each TypedDict class of a stub, its bases' included (also
    those of the options the stubs share, posenc/_options_types.pyi)."""
    shared = os.path.join(os.path.dirname(posenc.__file__), "_options_types.pyi")
    with open(shared, encoding="utf-8") as f:
        body = ast.parse(f.read()).body + tree.body
    classes = {n.name: n for n in body if isinstance(n, ast.ClassDef)}

    def keys(name):
        node = classes[name]
        found = [k for b in node.bases if class_name(b) in classes for k in keys(class_name(b))]
        return found + [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]

    return {name: keys(name) for name in classes}


def definitions(fn):
    """The ``def`` nodes of `fn` in the stub beside its module (``rope.pyi``
    beside ``rope.py``, where the overloads are) when there is one, else in
    its module's source: its overloads when it has them, else its own
    definition.  A stub's ``**options: Unpack[T]`` is read as T's keys
    (``node.unpacked``)."""
    fn = inspect.unwrap(fn)
    module = sys.modules[fn.__module__]
    stub = module.__file__[: -len(".py")] + ".pyi"
    in_stub = module.__file__.endswith(".py") and os.path.isfile(stub)
    if in_stub:
        with open(stub, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    else:
        tree = ast.parse(inspect.getsource(module))
    owner = fn.__qualname__.split(".")[0] if "." in fn.__qualname__ else None
    scope = tree.body
    if owner is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner).body
    nodes = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == fn.__name__]
    overloads = [
        n
        for n in nodes
        if any(getattr(d, "id", getattr(d, "attr", None)) == "overload" for d in n.decorator_list)
    ]
    for node in overloads or nodes:
        node.stub = in_stub
        kwarg = node.args.kwarg
        if kwarg is not None and isinstance(kwarg.annotation, ast.Subscript):
            node.unpacked = stub_typed_dicts(tree)[typed_dict_name(kwarg.annotation)]
    return overloads or nodes


def unannotated(node):
    args = node.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    missing = [a.arg for a in params if a.annotation is None and a.arg != "self"]
    if node.returns is None:
        missing.append("return")
    return missing


def namespace(fn):
    """The names an annotation of `fn` may use: its module's, and those its
    module imports for type checkers only."""
    names = dict(vars(sys.modules[inspect.unwrap(fn).__module__]))
    from matplotlib.figure import Figure

    names["Figure"] = Figure
    return names


def test_the_public_api_is_all_there():
    names = {name for name, _ in FUNCTIONS}
    for name in ("posenc.apply_rope", "posenc.sinusoid", "posenc.t5_bias", "posenc.probe.report"):
        assert name in names
    assert "posenc.probe.ProbeReport.plot" in names
    assert "posenc.probe.Informativeness.rank_for" in names
    assert len(FUNCTIONS) >= 30


def routed(fn):
    """The parameter the torch/JAX routing adds to a function's signature
    (``device=``, handled by the wrapper, not declared by the function)."""
    return {"device"} if hasattr(fn, "__wrapped_numpy__") else set()


@pytest.mark.skipif(not SOURCE_READABLE, reason="posenc's sources are not beside it")
@pytest.mark.parametrize("name,fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_every_public_function_is_annotated_throughout(name, fn):
    nodes = definitions(fn)
    assert nodes, f"{name}: no definition found"
    params = set(inspect.signature(fn).parameters) - {"self"} - routed(fn)
    for node in nodes:
        assert unannotated(node) == [], (
            f"{name} (line {node.lineno}) lacks annotations of {unannotated(node)}: annotate it "
            "(the types are in posenc/_typing.py)"
        )
        args = node.args
        declared = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} - {"self"}
        declared |= set(getattr(node, "unpacked", ()))
        declared -= routed(fn)  # a stub declares device= (the wrapper's), the function not
        assert declared == params, f"{name} (line {node.lineno}) differs from the function"


@pytest.mark.skipif(not SOURCE_READABLE, reason="posenc's sources are not beside it")
@pytest.mark.parametrize("name,fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_every_annotation_resolves_at_run_time(name, fn):
    names = namespace(fn)
    for node in definitions(fn):
        if node.stub:  # read by type checkers only, never evaluated
            continue
        args = node.args
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            if a.annotation is not None:
                eval(ast.unparse(a.annotation), names)  # noqa: S307 - our own source
        if node.returns is not None:
            eval(ast.unparse(node.returns), names)  # noqa: S307


def test_functions_without_overloads_resolve_with_get_type_hints():
    checked = 0
    for name, fn in FUNCTIONS:
        hints = typing.get_type_hints(inspect.unwrap(fn), namespace(fn))
        if hints:
            params = set(inspect.signature(fn).parameters) - {"self"} - routed(fn)
            assert set(hints) == params | {"return"}, name
            checked += 1
    assert checked >= 15


def test_the_installed_package_is_marked_typed_and_ships_the_extension_stub():
    root = importlib.resources.files("posenc")
    assert (root / "py.typed").is_file()
    stub = (root / "_core.pyi").read_text()
    from posenc import _core

    for name in ("set_num_threads", "get_num_threads", "simd_path", "simd_cpu", "set_simd"):
        assert f"def {name}(" in stub and callable(getattr(_core, name))
    for name in ("SINUSOID_LAYOUTS", "ROPE_LAYOUTS", "MAX_Q_OFFSET", "T5_MAX_BUCKETS", "openmp"):
        assert f"{name}:" in stub and hasattr(_core, name)


STUBBED = [
    (name, fn)
    for name, fn in FUNCTIONS
    if os.path.isfile(sys.modules[inspect.unwrap(fn).__module__].__file__[:-3] + ".pyi")
]


@pytest.mark.skipif(not SOURCE_READABLE, reason="posenc's sources are not beside it")
@pytest.mark.parametrize("name,fn", STUBBED, ids=[n for n, _ in STUBBED])
def test_each_stub_signature_has_the_functions_parameters(name, fn):
    # mypy.stubtest merges overloads before it reads ``**options: Unpack[TypedDict]``, so
    # for the overloaded functions the comparison of names and kinds is made here
    path = sys.modules[inspect.unwrap(fn).__module__].__file__[:-3] + ".pyi"
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    typed_dicts = stub_typed_dicts(tree)
    runtime = inspect.signature(fn).parameters.values()
    positional = [p.name for p in runtime if p.kind is p.POSITIONAL_OR_KEYWORD]
    optional = sum(p.default is not p.empty for p in runtime if p.kind is p.POSITIONAL_OR_KEYWORD)
    keywords = {p.name for p in runtime if p.kind is p.KEYWORD_ONLY}
    body = tree.body  # a method's: its class's
    for cls in inspect.unwrap(fn).__qualname__.split(".")[:-1]:
        body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls), [])
    nodes = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__]
    assert nodes, f"{name}: not in {path}"
    for node in nodes:
        args = node.args
        assert [a.arg for a in args.args] == positional, f"{name} (line {node.lineno})"
        assert len(args.defaults) == optional, f"{name} (line {node.lineno}): defaults"
        declared = [a.arg for a in args.kwonlyargs]
        if args.kwarg is not None:
            unpack = args.kwarg.annotation
            assert isinstance(unpack, ast.Subscript) and unpack.value.id == "Unpack", name
            declared += typed_dicts[typed_dict_name(unpack)]
        assert len(set(declared)) == len(declared), f"{name} (line {node.lineno}) repeats"
        assert set(declared) == keywords, f"{name} (line {node.lineno})"


def test_the_position_ids_are_one_function_under_each_name():
    import posenc.positions
    import posenc.rope_tools
    from posenc.rope_tools import mrope_position_ids  # the name of earlier releases

    assert posenc.positions.__all__ == [
        "mrope_position_ids",
        "pose_position_ids",
        "positions_from_cu_seqlens",
        "randomized_position_ids",
        "vision_position_ids",
    ]
    assert "positions" in posenc.__all__ and posenc.positions is sys.modules["posenc.positions"]
    for name in posenc.positions.__all__:
        fn = getattr(posenc.positions, name)
        assert fn is getattr(posenc, name)
        if name in ("mrope_position_ids", "positions_from_cu_seqlens", "vision_position_ids"):
            # also under the module of earlier releases
            assert fn is getattr(posenc.rope_tools, name)
            assert inspect.unwrap(fn).__module__ == "posenc.positions"
        else:  # the samplers, in their own private module
            assert inspect.unwrap(fn).__module__ in ("posenc.positions", "posenc._samplers")
    assert mrope_position_ids is posenc.positions.mrope_position_ids
