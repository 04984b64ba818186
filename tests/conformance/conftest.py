"""Conformance tests compare posenc with transformers' own functions.

They need torch and transformers.  Where those are missing they are skipped,
except when POSENC_REQUIRE_CONFORMANCE=1 (as CI sets it): then a missing
package is an error, so that the witness cannot silently drop out.
"""

import pytest
from optional import require  # the conformance tests import it from here


@pytest.fixture(scope="session")
def torch():
    return require("torch")


@pytest.fixture(scope="session")
def transformers():
    return require("transformers")
