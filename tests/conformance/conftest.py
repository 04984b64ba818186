"""Conformance tests compare posenc with transformers' own functions.

They need torch and transformers.  Where those are missing they are skipped,
except when POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it): then a missing
package is an error, so that the witness cannot silently drop out.
"""

import importlib
import os

import pytest


def require(name):
    """Import `name`, or skip (error under POSENC_REQUIRE_CONFORMANCE=1)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("POSENC_REQUIRE_CONFORMANCE") == "1":
            raise RuntimeError(
                f"{name} is required for the conformance tests (POSENC_REQUIRE_CONFORMANCE=1)"
            ) from exc
        pytest.skip(f"{name} is not installed")


@pytest.fixture(scope="session")
def torch():
    return require("torch")


@pytest.fixture(scope="session")
def transformers():
    return require("transformers")
