"""The Examples sections of the public functions' docstrings run, and give
what they show.

Every function of ``posenc.__all__`` and ``posenc.positions`` is a case: its
docstring's examples are run by doctest with ``np`` and ``posenc`` imported,
as the docstrings assume.  A function without an Examples section, or
with one that holds no example, fails; so does a function of
``posenc.probe.__all__`` (whose examples tests/conformance/test_readme.py
runs).  Every function that takes ``device=`` documents it.
"""

import doctest
import inspect
import os
import re

import numpy as np
import pytest

import posenc
import posenc.bias
import posenc.positions
import posenc.probe


def public_functions():
    found = {}
    for module, names in (
        (posenc, posenc.__all__),
        (posenc.positions, posenc.positions.__all__),
        (posenc.bias, ["t5_bias_table_grad"]),
    ):
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                found.setdefault(f"{inspect.unwrap(obj).__module__}.{obj.__name__}", obj)
    return sorted(found.items())


FUNCTIONS = public_functions()


@pytest.mark.parametrize("name,fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_the_examples_of_the_docstring_run(name, fn):
    doc = inspect.getdoc(fn) or ""
    assert "\nExamples\n--------\n" in doc, f"{name}: its docstring has no Examples section"
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(fn, name, globs={"np": np, "posenc": posenc})
    assert sum(len(t.examples) for t in tests), f"{name}: its Examples section holds no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    if runner.summarize(verbose=False).failed:
        pytest.fail("".join(report))


# ------------------------------------------------------------------ device=

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs")
# the public functions that are not routed to torch and JAX, and so take no device=
WITHOUT_DEVICE = {
    "chunked_causal_mask",
    "config",
    "get_num_threads",
    "irope_layers",
    "pose_position_ids",
    "randomized_position_ids",
    "set_num_threads",
    "show_config",
    "simd_path",
}
WITH_DEVICE = [(name, fn) for name, fn in FUNCTIONS if "device" in inspect.signature(fn).parameters]


def _section(doc, title):
    """The lines of the numpydoc section `title` of `doc` (empty if it has none)."""
    match = re.search(rf"^{title}\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, flags=re.M | re.S)
    return match.group(1).splitlines() if match else []


def test_the_functions_without_device_are_the_unrouted_ones():
    # the list docs/guide/conventions.md gives
    names = {
        name
        for name in posenc.__all__
        if inspect.isfunction(getattr(posenc, name))
        and "device" not in inspect.signature(getattr(posenc, name)).parameters
    }
    assert names == WITHOUT_DEVICE
    assert len(WITH_DEVICE) >= 32


@pytest.mark.parametrize("name,fn", WITH_DEVICE, ids=[n for n, _ in WITH_DEVICE])
def test_device_is_in_the_parameters_and_points_to_the_guide(name, fn):
    lines = _section(inspect.getdoc(fn) or "", "Parameters")
    entries = [i for i, line in enumerate(lines) if re.match(r"device\b.* : ", line + " ")]
    assert entries, f"{name}: its Parameters section does not document device"
    (i,) = entries
    assert lines[i].startswith("device : None, ")
    assert ":ref:`device-argument`" in lines[i + 1], f"{name}: device does not point to the guide"
    # and last, as in the signature, where @foreign puts it
    assert all(not line or line.startswith(" ") for line in lines[i + 1 :]), name


def test_the_device_target_is_in_the_conventions_guide():
    path = os.path.join(DOCS, "guide", "conventions.md")
    if not os.path.exists(path):
        pytest.skip("docs/ is not beside these tests")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert "(device-argument)=\n## `device=`" in text


# ------------------------------------------------------------------ the probes

# the probes' Examples are run by tests/conformance/test_readme.py (those that build a
# transformers model need torch and transformers); here, that every public function has them
PROBE_FUNCTIONS = [
    (name, getattr(posenc.probe, name))
    for name in posenc.probe.__all__
    if inspect.isfunction(getattr(posenc.probe, name))
]
# no Examples section yet
PROBE_WITHOUT_EXAMPLES: set = set()


@pytest.mark.parametrize(
    "name,fn",
    [
        pytest.param(
            name,
            fn,
            marks=[pytest.mark.xfail(strict=True)] if name in PROBE_WITHOUT_EXAMPLES else [],
        )
        for name, fn in PROBE_FUNCTIONS
    ],
    ids=[n for n, _ in PROBE_FUNCTIONS],
)
def test_the_probes_have_examples(name, fn):
    doc = inspect.getdoc(fn) or ""
    assert "\nExamples\n--------\n" in doc, f"{name}: its docstring has no Examples section"
    tests = doctest.DocTestFinder(recurse=False).find(fn, name)
    assert sum(len(t.examples) for t in tests), f"{name}: its Examples section holds no example"
