"""posenc's modules stand in layers: what ARCHITECTURE.md says of them holds.

The witness is the source itself, read with ``ast``: every import of every
module of posenc/, posenc/probe/, posenc/context/ and posenc/lab/ (at the top
of a module or inside a function: both run), each resolved to the module it
names.  Checked:

- no import circle among them (a module never reaches itself through the
  modules it imports);
- no module imports an underscore name from a module without one (a private
  helper that others use lives in a private module, where a rename is seen
  by every import of it);
- the core layer (the private modules under the public ones) imports
  nothing above it;
- no module is looked up by a string at run time (``sys.modules``,
  ``importlib.import_module``, the records' registry by a literal name),
  where no import, grep or type checker would see a rename.

The exemptions below are what is left to do: each must still be needed
(the test fails when one is not), so the lists can only shrink.
"""

import ast
import functools
import pathlib

import pytest

import posenc

PACKAGE = pathlib.Path(posenc.__file__).parent
SOURCES = (
    sorted(PACKAGE.glob("*.py"))
    + sorted(PACKAGE.glob("probe/*.py"))
    + sorted(PACKAGE.glob("context/*.py"))
    + sorted(PACKAGE.glob("lab/*.py"))
)
pytestmark = pytest.mark.skipif(not SOURCES, reason="posenc's source is not installed")

# ---------------------------------------------------------------- exemptions

#: import circles not yet taken apart, each as the set of its modules
CIRCLES_LEFT: set = set()

#: (importer, module, name) of the underscore names still imported from a
#: module without an underscore
UNDERSCORE_IMPORTS_LEFT: set = set()

#: (reader, module, name) of the underscore attributes still read from a
#: module without an underscore (``probe._load``)
UNDERSCORE_ATTRIBUTES_LEFT = {
    # the command line drives the probe's and the hub's helpers
    ("posenc.__main__", "posenc.probe", "_TooManyPositions"),
    ("posenc.__main__", "posenc.probe", "_plot_format"),
    ("posenc.__main__", "posenc.probe", "_table"),
    ("posenc.__main__", "posenc.probe", "_to_numpy"),
}

#: (module, key) of the sys.modules lookups of another library's modules
#: (transformers' modeling files), never posenc's
OTHER_LIBRARIES = {
    ("posenc.hf", "inner.__module__"),
    ("posenc.probe.rope_usage", "name"),
}

#: the core layer: private modules under the public ones, which import only
#: each other and BASE
CORE = {
    "posenc._complex_order",
    "posenc._cope",
    "posenc._distance_bias",
    "posenc._frequencies",
    "posenc._functional_grad",
    "posenc._kerple_fire",
    "posenc._model_config",
    "posenc._relative_engine",
    "posenc._relative_terms",
    "posenc._rope_plan",
    "posenc._rope_positions",
    "posenc._t5",
    "posenc._t5_bias",
    # public by its name (users read FAMILIES, read and resolve), it reads
    # RoPE configurations for the core layer and imports nothing above it
    "posenc.rope_scaling",
}
#: what the core layer stands on
BASE = {"posenc._core", "posenc._validate", "posenc._dtypes", "posenc._typing"}

# ---------------------------------------------------------------- the graph


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


#: every module of posenc by name: its source, or None (the C extension)
MODULES = {_module_name(p): p for p in SOURCES}
MODULES.update({f"posenc.{p.name.partition('.')[0]}": None for p in PACKAGE.glob("_core*")})


def _is_package(name):
    path = MODULES.get(name)
    return path is not None and path.name == "__init__.py"


def _absolute(importer, level, module):
    """The module `from <level dots><module> import ...` names in `importer`."""
    if level == 0:
        return module
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


@functools.cache
def _tree(path):
    return ast.parse(path.read_text(encoding="utf-8"))


def imports(name):
    """(module imported, the name taken from it or None, line) of every
    import of posenc module `name`, wherever it stands in the module."""
    found = []
    for node in ast.walk(_tree(MODULES[name])):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "posenc":
                    found.append((alias.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(name, node.level, node.module)
            if not source or source.split(".")[0] != "posenc":
                continue
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:  # from package import submodule
                    found.append((f"{source}.{alias.name}", None, node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return found


def graph():
    """{module: the posenc modules it imports}."""
    edges = {}
    for name, path in MODULES.items():
        if path is None:
            edges[name] = set()
            continue
        targets = set()
        for module, _, _ in imports(name):
            while module not in MODULES and "." in module:  # a name inside a module
                module = module.rpartition(".")[0]
            if module in MODULES and module != name:
                targets.add(module)
        edges[name] = targets
    return edges


def circles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return set(found)


def _private(module):
    return module.rpartition(".")[2].startswith("_")


def underscore_imports():
    """(importer, module, name) of each underscore name imported from a
    posenc module whose own name has no leading underscore."""
    found = set()
    for name, path in MODULES.items():
        if path is None:
            continue
        for module, taken, _ in imports(name):
            if taken is None or not taken.startswith("_") or taken.startswith("__"):
                continue
            if module in MODULES and not _private(module):
                found.add((name, module, taken))
    return found


def _module_aliases(name):
    """{local name: posenc module} of the modules `name` imports as modules
    (``from . import rope_scaling as _rope_scaling``, ``import posenc.rope``)."""
    aliases = {}
    for node in ast.walk(_tree(MODULES[name])):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(name, node.level, node.module)
            for alias in node.names:
                if source and f"{source}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
    return aliases


def underscore_attributes():
    """(reader, module, name) of each underscore attribute read from a posenc
    module without an underscore through the name it is imported as
    (``rope_scaling._TABLE``): an import of that name in other words."""
    found = set()
    for name, path in MODULES.items():
        if path is None:
            continue
        aliases = _module_aliases(name)
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not _private(aliases[node.value.id])
            ):
                found.add((name, aliases[node.value.id], node.attr))
    return found


# ---------------------------------------------------------------- the checks


def test_the_graph_sees_every_spelling_of_an_import(tmp_path, monkeypatch):
    source = tmp_path / "m.py"
    source.write_text(
        "from . import _core, rope as r\nfrom .bias import t5_bias\n"
        "import posenc.relative\nfrom .probe import hub\n"
        "def f():\n    from .probe.analyses import _table\n"
    )
    monkeypatch.setitem(MODULES, "posenc.m", source)
    assert sorted(imports("posenc.m")) == [
        ("posenc._core", None, 1),
        ("posenc.bias", "t5_bias", 2),
        ("posenc.probe.analyses", "_table", 6),
        ("posenc.probe.hub", None, 4),
        ("posenc.relative", None, 3),
        ("posenc.rope", None, 1),
    ]


def test_the_circle_finder_finds_a_circle_and_only_it():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert circles(edges) == {frozenset("abc")}


def test_no_import_circle_but_those_left():
    found = circles(graph())
    assert found - CIRCLES_LEFT == set(), "new import circles"
    assert CIRCLES_LEFT - found == set(), "circles gone: take them off CIRCLES_LEFT"


def test_no_underscore_name_imported_from_a_public_module_but_those_left():
    found = underscore_imports()
    assert found - UNDERSCORE_IMPORTS_LEFT == set(), "new imports of underscore names"
    assert UNDERSCORE_IMPORTS_LEFT - found == set(), "gone: take them off the list"


def test_underscore_attributes_are_seen(tmp_path, monkeypatch):
    source = tmp_path / "m.py"
    source.write_text(
        "from . import rope_scaling as rs, _validate as v\n"
        "def f():\n    return rs._TABLE, v._private, rs.read, rs.__name__\n"
    )
    monkeypatch.setitem(MODULES, "posenc.m", source)
    assert {f for f in underscore_attributes() if f[0] == "posenc.m"} == {
        ("posenc.m", "posenc.rope_scaling", "_TABLE")
    }


def test_no_underscore_attribute_read_from_a_public_module_but_those_left():
    found = underscore_attributes()
    assert found - UNDERSCORE_ATTRIBUTES_LEFT == set(), "new reads of underscore attributes"
    assert UNDERSCORE_ATTRIBUTES_LEFT - found == set(), "gone: take them off the list"


def test_the_core_layer_imports_only_itself_and_its_base():
    edges = graph()
    assert CORE <= set(MODULES) and BASE <= set(MODULES)
    for name in sorted(CORE):
        above = edges[name] - CORE - BASE
        assert not above, f"{name} imports {sorted(above)}, above the core layer"


def _string_lookups(name):
    """Where module `name` looks a module or a routed function up by a
    string: sys.modules[...], importlib.import_module or __import__ of
    posenc's own modules, _records.module(...), _records.function("...")."""
    found = []
    for node in ast.walk(_tree(MODULES[name])):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
            if (name, ast.unparse(node.slice)) not in OTHER_LIBRARIES:
                found.append((node.lineno, ast.unparse(node)))
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func)
        literal = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if called.endswith("_records.module") or called == "module" and name.endswith("_records"):
            found.append((node.lineno, ast.unparse(node)))
        elif called.endswith("_records.function") and literal:
            found.append((node.lineno, ast.unparse(node)))
        elif called.rpartition(".")[2] in ("import_module", "__import__") and any(
            isinstance(s, str) and (s.startswith("posenc") or s.startswith(".")) for s in literal
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_is_looked_up_by_a_string():
    found = {name: _string_lookups(name) for name, path in MODULES.items() if path is not None}
    assert {name: got for name, got in found.items() if got} == {}


def test_the_lookup_check_sees_each_kind_of_lookup(tmp_path, monkeypatch):
    source = tmp_path / "m.py"
    source.write_text(
        "import sys, importlib\nrope = sys.modules['posenc.rope']\n"
        "importlib.import_module('posenc.bias')\n_records.module('apply_rope')\n"
        "_records.function('t5_bias_table_grad')\n_records.function(name)\n"
        "importlib.import_module('torch')\n"
    )
    monkeypatch.setitem(MODULES, "posenc.m", source)
    assert [line for line, _ in _string_lookups("posenc.m")] == [2, 3, 4, 5]
