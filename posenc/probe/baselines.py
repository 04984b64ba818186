"""Every figure of a report beside what noise scores: the same measure on
tables that hold no positions.

For each seed ``s`` two tables of the probed table's shape are made:

- *random, row norms kept*: a Gaussian table (``numpy.random.default_rng([s,
  0]).standard_normal``) whose row ``p`` is scaled to the norm of the probed
  table's row ``p`` (so that a measure that reads the norms alone scores as
  it does on the table);
- *rows shuffled*: the probed table's rows in the order of
  ``numpy.random.default_rng([s, 1]).permutation``: the same vectors, their
  positions forgotten.

Each measure is taken on both with the same seed as the table's probes, and
:class:`Baseline` holds the figures per seed, their mean and standard
deviation.  A figure is above noise where it lies well outside both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

#: The two kinds of table without positions, by name.
KINDS: Tuple[str, ...] = ("random", "shuffled")

#: What each kind is called in the report.
KIND_NAMES: Dict[str, str] = {
    "random": "random table, row norms kept",
    "shuffled": "rows shuffled",
}


def null_table(E: np.ndarray, kind: str, seed: int) -> np.ndarray:
    """The table of `kind` (``"random"`` or ``"shuffled"``) for `seed`.

    Examples
    --------
    >>> E = np.arange(12.0).reshape(4, 3)
    >>> R = null_table(E, "random", 0)
    >>> bool(np.allclose(np.linalg.norm(R, axis=1), np.linalg.norm(E, axis=1)))
    True
    >>> sorted(map(tuple, null_table(E, "shuffled", 0))) == sorted(map(tuple, E))
    True
    """
    if kind == "random":
        g = np.random.default_rng([seed, 0]).standard_normal(E.shape)
        norms = np.linalg.norm(g, axis=1)
        norms[norms == 0] = 1.0
        return g * (np.linalg.norm(E, axis=1) / norms)[:, None]
    if kind == "shuffled":
        return E[np.random.default_rng([seed, 1]).permutation(E.shape[0])]
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


@dataclass(frozen=True)
class Baseline:
    """One measure's figures on one kind of table without positions.

    Attributes
    ----------
    kind : str
        ``"random"`` or ``"shuffled"`` (see the module).
    measure : str
        The measure's name, as in the report's JSON.
    per_seed : tuple of float
        The figure for each seed.
    """

    kind: str
    measure: str
    per_seed: Tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_seed))

    @property
    def std(self) -> float:
        return float(np.std(self.per_seed))

    def to_dict(self) -> Dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "per_seed": list(self.per_seed)}


def measure_baselines(
    E: np.ndarray, seeds: Sequence[int], measures: Callable[[np.ndarray, int], Dict[str, float]]
) -> Dict[str, Dict[str, Baseline]]:
    """``{kind: {measure: Baseline}}``: `measures` (a table and a seed to
    ``{name: figure}``) on each kind of table, for each seed."""
    out: Dict[str, Dict[str, Baseline]] = {}
    for kind in KINDS:
        figures: Dict[str, List[float]] = {}
        for seed in seeds:
            for name, value in measures(null_table(E, kind, seed), seed).items():
                figures.setdefault(name, []).append(float(value))
        out[kind] = {name: Baseline(kind, name, tuple(values)) for name, values in figures.items()}
    return out


def beside(value: float, baselines: Dict[str, Dict[str, Baseline]], measure: str, fmt: str) -> str:
    """``"value (random a ± b, rows shuffled c ± d)"``."""
    parts = [
        f"{KIND_NAMES[kind].split(',')[0]} {format(b.mean, fmt)} ± {format(b.std, fmt)}"
        for kind in KINDS
        if (b := baselines.get(kind, {}).get(measure)) is not None
    ]
    return format(value, fmt) + (f" (noise: {'; '.join(parts)})" if parts else "")
