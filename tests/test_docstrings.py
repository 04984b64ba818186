"""The Examples sections of the public functions' docstrings run, and give
what they show.

Every function of ``posenc.__all__`` and ``posenc.positions`` is a case: its
docstring's examples are run by doctest with ``np`` and ``posenc`` imported,
as the docstrings assume.  A function without an Examples section, or
with one that holds no example, fails.
"""

import doctest
import inspect

import numpy as np
import pytest

import posenc
import posenc.bias
import posenc.positions


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
