"""The tests' optional packages (torch, JAX, transformers, ...): a module
shared by the test files, not collected by pytest."""

import importlib
import os

import pytest


def require(name):
    """Import `name`, or skip the test (or, at a module's top, the module)
    where it is missing; under POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it)
    a missing package is an error, so that a witness cannot silently drop
    out."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("POSENC_REQUIRE_CONFORMANCE") == "1":
            raise RuntimeError(f"{name} is required (POSENC_REQUIRE_CONFORMANCE=1)") from exc
        pytest.skip(f"{name} is not installed", allow_module_level=True)
