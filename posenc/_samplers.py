"""Position ids for training short and evaluating long.

Two samplers that give a short training sequence the position ids of a longer
one, so a model meets large positions and large distances without paying
for long sequences:

* :func:`randomized_position_ids`, Ruoss et al. 2023 ("Randomized Positional
  Encodings Boost Length Generalization of Transformers"): ``n`` positions
  drawn without replacement from ``range(max_len)`` and sorted, so the order
  of the tokens is kept and only the gaps between them are random.
* :func:`pose_position_ids`, Zhu et al. 2023 ("PoSE: Efficient Context
  Window Extension of LLMs via Positional Skip-wise Training"): the ``n``
  tokens split into two chunks, the second shifted by a random skip so the
  ids reach up to ``target_len - 1``, as the authors' ``train_pose.py``
  draws them (see the function).

Both return int64 ids that :func:`posenc.apply_rope`, :func:`posenc.sinusoid`
and the relative-position helpers take as positions.  Given the same seed
(or a :class:`numpy.random.Generator` in the same state) they give the same
ids; the caller's generator is advanced, never replaced.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _validate
from ._typing import NDArray

__all__ = ["pose_position_ids", "randomized_position_ids"]

# The most rows one call draws: they are drawn one at a time, in Python.
_MAX_BATCH = 1 << 16
# The largest max_len NumPy's Generator.choice draws from (an int64), and the
# largest target_len whose ids (up to target_len - 1) are int64.
_MAX_LEN = 2**63 - 1
_MAX_TARGET = 2**63


def _generator(seed):
    """A Generator from `seed`: None (fresh entropy), an int >= 0, a
    SeedSequence, or a Generator used as it is (advanced by the draw)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.RandomState):
        raise TypeError(
            "seed must be None, an int, a SeedSequence or a numpy Generator, not RandomState"
        )
    seed = _validate.integer(seed, "seed", minimum=0)
    return np.random.default_rng(seed)


def _rows(n, batch, seed, draw):
    """int64 ids of shape ``(n,)`` (`batch` None) or ``(batch, n)``, each row
    ``draw(rng)`` with the Generator of `seed`, the rows drawn in order."""
    if batch is not None:
        batch = _validate.integer(batch, "batch", minimum=1)
        if batch > _MAX_BATCH:
            raise ValueError(
                f"batch must be <= {_MAX_BATCH} (the rows are drawn one at a time), got {batch}; "
                "for more rows, call again with the same numpy Generator as seed: its rows "
                "continue where the last call's stopped"
            )
    rows = 1 if batch is None else batch
    _validate.shape_size((rows, n), "n" if batch is None else "batch and n", 8)
    rng = _generator(seed)
    ids = np.empty((rows, n), dtype=np.int64)
    for b in range(rows):
        ids[b] = draw(rng)
    return ids[0] if batch is None else ids


def randomized_position_ids(
    n: int, max_len: int, *, batch: Optional[int] = None, seed: Any = None
) -> NDArray[np.int64]:
    """Sorted random position ids (Ruoss et al. 2023).

    Parameters
    ----------
    n : int
        Number of positions (the sequence length), ``0 <= n <= max_len``.
    max_len : int
        The positions are drawn from ``range(max_len)``,
        ``1 <= max_len <= 2**63 - 1``: the longest length the model is
        meant to handle.
    batch : int, optional
        None gives one row of shape ``(n,)``; an int ``1 <= b <= 65536``
        gives ``(b, n)``, each row drawn independently (the rows are drawn
        one at a time: for more, call again with the same Generator, whose
        rows continue where the last call's stopped).
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Where the randomness comes from; the same seed gives the same ids.

    Returns
    -------
    numpy.ndarray of int64, shape ``(n,)`` or ``(batch, n)``
        Strictly increasing ids in ``[0, max_len)`` along the last axis.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> ids = posenc.randomized_position_ids(4, 100, seed=0)
    >>> ids.shape, bool(np.all(np.diff(ids) > 0)), bool(ids.max() < 100)
    ((4,), True, True)
    >>> posenc.randomized_position_ids(3, 50, batch=2, seed=1).shape
    (2, 3)
    """
    n = _validate.integer(n, "n", minimum=0)
    max_len = _validate.integer(max_len, "max_len", minimum=1)
    if max_len > _MAX_LEN:
        raise ValueError(
            f"max_len must be <= 2**63 - 1 (NumPy draws from an int64 range), got {max_len}"
        )
    if n > max_len:
        raise ValueError(f"n must be <= max_len ({max_len}) to draw without replacement, got {n}")
    return _rows(
        n,
        batch,
        seed,
        lambda rng: np.sort(rng.choice(max_len, size=n, replace=False, shuffle=False)),
    )


def pose_position_ids(
    n: int, target_len: int, *, batch: Optional[int] = None, seed: Any = None
) -> NDArray[np.int64]:
    """Skip-wise position ids of PoSE (Zhu et al. 2023), two chunks.

    The ``n`` tokens of a training window are cut into a first chunk of
    ``l1`` tokens and a second of ``n - l1``; the first keeps ids
    ``0 .. l1 - 1``, the second is shifted by a skip ``u``:
    ``l1 + u .. n - 1 + u``.  As the authors' ``train_pose.py``
    (``train_preprocess_function_pose``) draws them, both uniformly with
    the ends included:

    * ``l1`` from ``1 .. (n + 1) // 2`` (the first chunk is at most half,
      rounded up, and never empty);
    * ``u`` from ``0 .. target_len - n``; the first chunk's skip is 0 (the
      repository's revision of the paper's draw, which makes large
      relative distances as likely as small ones).

    The paper describes ``N`` chunks with skips ``u_i`` drawn from
    ``u_{i-1} .. target_len - n``; its experiments and its code use
    ``N = 2``, which is what this function gives.  The ids span at most
    ``target_len`` and their largest is ``n - 1 + u <= target_len - 1``.
    The repository also takes the second chunk's tokens from further on in
    the document (``ids[lt2:rt2]``); which text fills the chunks is the
    data loader's choice, and only the ids are made here.

    Parameters
    ----------
    n : int
        The training window, ``1 <= n <= target_len``.
    target_len : int
        The context length to reach (the repository's
        ``scaled_max_position_embeddings``), at most ``2**63`` (the ids are
        int64).
    batch : int, optional
        None gives ``(n,)``; an int ``1 <= b <= 65536`` gives ``(b, n)``,
        each row drawn independently (as for
        :func:`randomized_position_ids`).
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Where the randomness comes from; the same seed gives the same ids.

    Returns
    -------
    numpy.ndarray of int64, shape ``(n,)`` or ``(batch, n)``

    Examples
    --------
    >>> import numpy as np, posenc
    >>> ids = posenc.pose_position_ids(6, 32, seed=0)  # two chunks, the second skipped ahead
    >>> ids.shape, int(ids[0]), bool(np.all(np.diff(ids) >= 1)), bool(ids[-1] < 32)
    ((6,), 0, True, True)
    """
    n = _validate.integer(n, "n", minimum=1)
    target_len = _validate.integer(target_len, "target_len", minimum=1)
    if target_len > _MAX_TARGET:
        raise ValueError(
            f"target_len must be <= 2**63 (the ids, up to target_len - 1, are int64), "
            f"got {target_len}"
        )
    if n > target_len:
        raise ValueError(f"n must be <= target_len ({target_len}), got {n}")

    def draw(rng):
        first = int(rng.integers(1, (n + 1) // 2, endpoint=True))
        skip = int(rng.integers(0, target_len - n, endpoint=True))
        ids = np.arange(n, dtype=np.int64)
        ids[first:] += skip
        return ids

    return _rows(n, batch, seed, draw)
