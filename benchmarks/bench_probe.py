"""The probe: the whole report of a 512 x 768 table (``posenc probe --analyses all``)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from common import Case
from sklearn.linear_model import LinearRegression

import posenc
from posenc import probe
from posenc.probe import _fits


def _linear_regression(X, y, test, cut):
    return LinearRegression(tol=cut).fit(X, y).predict(test)


def _report_with_scikit_learn(table):
    """The report as it was fitted before: every least-squares fold by
    scikit-learn's LinearRegression itself."""
    with (
        mock.patch.object(_fits, "least_squares_predictions", lambda *args: None),
        mock.patch.object(_fits, "lstsq_predictions", _linear_regression),
    ):
        return probe.report(table, progress=False)


def probe_cases(quick):
    n, dim = (128, 192) if quick else (512, 768)
    tables = {
        # the built-in table of `posenc probe`: its folds are fitted by scikit-learn
        "sinusoid": posenc.sinusoid(n, dim, dtype="float64"),
        # a table whose folds the QR fit takes
        "gaussian": np.random.default_rng(0).standard_normal((n, dim)),
    }
    return [
        Case(
            name=f"probe.report({what} {n} x {dim}), every analysis, 10 seeds",
            nbytes=table.nbytes,
            posenc=lambda table=table: probe.report(table, progress=False),
            # no floor: the report is fits, not a pass over the table's bytes
            numpy=lambda table=table: _report_with_scikit_learn(table),
            note="numpy: the same report with scikit-learn's LinearRegression for every fold",
        )
        for what, table in tables.items()
    ]
