"""Length-generalization tasks, generated in code.

Each task makes batches of token sequences for a causal (decoder) language
model: ``task.batch(n, length, rng)`` returns a :class:`TaskBatch` whose
``tokens`` are what the model reads and whose ``targets`` say what it must
predict, ``-100`` (:data:`IGNORE`, PyTorch's ``ignore_index``) where nothing
is asked.  The tasks are those of the length-generalization literature:

========================  =====================================================
``copy``                  the input, repeated after a separator
``reverse``               the input, reversed after a separator
``counting``              how many times a query symbol occurs in the input
``selective_copy``        the data tokens scattered among blanks, in order
``flip_flop``             the flip-flop language of Liu et al. 2023
                          ("Exposing Attention Glitches with Flip-Flop
                          Language Modeling"): each read returns the last
                          written bit
``associative_recall``    the value bound to a queried key
``addition``              the sum of two numbers, digit by digit (reversed or
                          plain order)
========================  =====================================================

The conventions every task shares:

* ``length`` is the number of tokens the model sees: ``tokens`` has
  ``length`` columns, for every task, so tables are comparable across
  tasks.  A sequence of ``length + 1`` tokens is made and shifted:
  ``tokens = seq[:-1]``, ``targets = seq[1:]`` where ``seq[1:]`` is an answer
  token and ``-100`` elsewhere, so the model's output at position ``t`` is
  compared with ``targets[:, t]``.  The last token of every sequence is an
  answer token, so the last position always carries a loss.
* The instance size (how many symbols to copy, digits to add, pairs to
  bind, ...) is the largest that fits ``length``; what is left over (at
  most a token or two, where the layout's size does not divide evenly) is
  filled with ``pad_id`` at the *start*, before the ``<bos>`` token.  Pads
  there are the same token in every sequence and carry no loss, so they
  hold nothing about the instance: nothing can leak from them.  Inside a
  batch every sequence has the same layout (the same instance size and
  padding); only the content is random.
* Lengths below ``task.min_length`` are refused with a ValueError naming
  ``length``; above it every length works (every one up to 1024, 16 times
  a typical training length of 64, is checked).
* ``task.batch(n, length, rng)`` draws everything from the NumPy Generator
  `rng`: the same seed gives the same batch.
* Token 0 is ``pad_id`` and token 1 ``<bos>`` in every task; the rest are
  the task's own (``task.token_names`` lists them, ``task.render`` prints a
  sequence with them).

:func:`exact_match` scores a row 1 when the model's argmax is right at every
position that carries a loss, read from one teacher-forced forward pass.
This equals the exact match of greedy decoding (the model writing the
answer tokens itself, one at a time, the inputs between them given): if
every teacher-forced argmax on the answer is right, greedy decoding sees the
same prefix at each answer position (its own tokens so far are the true
ones), so it writes the same tokens, all right; if not, at the first wrong
teacher-forced argmax greedy decoding has seen the same prefix (every
earlier answer token right), so it writes the same wrong token.  Both need
the model to be causal (its output at ``t`` depends only on tokens up to
``t``), which the decoder is.  :func:`greedy_decode` decodes that way, for
a check.

Examples
--------
>>> import numpy as np
>>> from posenc.lab.tasks import TASKS, exact_match
>>> task = TASKS["copy"](n_symbols=4)
>>> batch = task.batch(2, 9, np.random.default_rng(0))
>>> batch.tokens.shape, batch.targets.shape
((2, 9), (2, 9))
>>> print(task.render(batch))
<bos> d c c b | [d] [c] [c] [b]
>>> float(exact_match(batch.targets, batch.targets).mean())
1.0
"""

from __future__ import annotations

from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

import numpy as np

from .. import _validate

__all__ = [
    "IGNORE",
    "TASKS",
    "AssociativeRecall",
    "Addition",
    "Copy",
    "Counting",
    "FlipFlop",
    "Reverse",
    "SelectiveCopy",
    "Task",
    "TaskBatch",
    "exact_match",
    "greedy_decode",
]

#: The target where no loss is taken (PyTorch's ``cross_entropy`` default
#: ``ignore_index``).
IGNORE = -100

PAD = 0
BOS = 1


class TaskBatch(NamedTuple):
    """A batch of one task: ``tokens`` (what the model reads) and
    ``targets`` (what it must predict at each position, :data:`IGNORE`
    where nothing is asked), both int64 of shape ``(n, length)``."""

    tokens: np.ndarray
    targets: np.ndarray


def _symbol_names(count: int, prefix: str) -> List[str]:
    if count <= 26 and prefix == "":
        return [chr(ord("a") + i) for i in range(count)]
    return [f"{prefix or 's'}{i}" for i in range(count)]


class Task:
    """A length-generalization task: a vocabulary and a generator of
    batches (see the module's docstring for the conventions).

    Subclasses say their layout in their docstring and implement
    ``_layout(length)`` (the instance size and the padding) and
    ``_sequences(n, size, pad, rng)``.
    """

    name: ClassVar[str] = ""
    pad_id: int = PAD
    #: the shortest length the task makes (set per instance where it
    #: depends on the task's options)
    min_length: int = 1

    def __init__(self) -> None:
        self.token_names: List[str] = ["<pad>", "<bos>"]

    # the tokens ----------------------------------------------------------

    def _add(self, names: Sequence[str]) -> int:
        """Append `names` to the vocabulary; the id of the first."""
        first = len(self.token_names)
        self.token_names.extend(names)
        return first

    @property
    def vocab_size(self) -> int:
        """The number of token ids: every token is in ``range(vocab_size)``."""
        return len(self.token_names)

    # the batches ---------------------------------------------------------

    def batch(self, n: int, length: int, rng: np.random.Generator) -> TaskBatch:
        """`n` sequences of `length` tokens each, drawn from `rng`.

        Parameters
        ----------
        n : int
            The number of sequences (>= 1).
        length : int
            The number of tokens the model sees (>= ``self.min_length``).
        rng : numpy.random.Generator
            Where every random choice comes from (advanced by the call).

        Returns
        -------
        TaskBatch
            ``tokens`` and ``targets``, int64 of shape ``(n, length)``.
        """
        n = _validate.integer(n, "n", minimum=1)
        length = _validate.integer(length, "length")
        if length < self.min_length:
            raise ValueError(
                f"length must be >= {self.min_length} for the {self.name} task "
                f"({self._smallest()}), got {length}"
            )
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng must be a numpy Generator (numpy.random.default_rng(seed)), "
                f"not {type(rng).__name__}"
            )
        size, pad = self._layout(length)
        seq, answer = self._sequences(n, size, rng)
        if pad:
            seq = np.concatenate([np.full((n, pad), PAD, dtype=np.int64), seq], axis=1)
            answer = np.concatenate([np.zeros((n, pad), dtype=bool), answer], axis=1)
        if seq.shape != (n, length + 1):  # pragma: no cover - a layout's own error
            raise AssertionError(f"{self.name}: a sequence of {seq.shape[1]} tokens for {length}")
        tokens = np.ascontiguousarray(seq[:, :-1])
        targets = np.where(answer[:, 1:], seq[:, 1:], IGNORE).astype(np.int64)
        return TaskBatch(tokens, targets)

    def _smallest(self) -> str:
        return "the smallest instance"

    def _layout(self, length: int) -> Tuple[Any, int]:  # pragma: no cover - abstract
        """The instance size for `length` (any value ``_sequences`` reads)
        and the number of pads before ``<bos>``."""
        raise NotImplementedError

    def _sequences(
        self, n: int, size: Any, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        """`n` sequences of the instance size `size` (without the padding)
        and the mask of their answer tokens, both ``(n, tokens)``."""
        raise NotImplementedError

    # reading -------------------------------------------------------------

    def render(self, batch: TaskBatch, row: int = 0) -> str:
        """Row `row` of `batch` as text: the whole sequence (the tokens and
        the last answer token), the tokens that carry a loss in brackets,
        the padding left out."""
        tokens = np.asarray(batch.tokens)[row]
        targets = np.asarray(batch.targets)[row]
        seq = list(tokens) + [targets[-1]]
        loss = [False] + list(targets != IGNORE)
        words = []
        for token, scored in zip(seq, loss):
            if token == PAD and not scored:
                continue
            name = self.token_names[int(token)]
            words.append(f"[{name}]" if scored else name)
        return " ".join(words)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ------------------------------------------------------------------ helpers


def _symbols(n_symbols: int) -> int:
    return _validate.integer(n_symbols, "n_symbols", minimum=1)


def _cat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts], axis=1)


def _column(n: int, token: int, width: int = 1) -> np.ndarray:
    return np.full((n, width), token, dtype=np.int64)


def _answer_mask(n: int, total: int, answer_from: int) -> np.ndarray:
    mask = np.zeros((n, total), dtype=bool)
    mask[:, answer_from:] = True
    return mask


# -------------------------------------------------------------------- tasks


class Copy(Task):
    """Copy the input after a separator.

    Layout: ``<bos> x_1 .. x_k | x_1 .. x_k`` with ``k = (length - 1) // 2``
    symbols drawn uniformly from `n_symbols`; the loss is on the second
    ``x_1 .. x_k`` (every token after ``|``).  An even `length` leaves one
    token, a pad before ``<bos>``.  ``min_length`` is 3 (``k = 1``).

    Examples
    --------
    >>> import numpy as np
    >>> task = Copy(n_symbols=4)
    >>> print(task.render(task.batch(1, 7, np.random.default_rng(1))))
    <bos> b c d | [b] [c] [d]
    """

    name = "copy"
    min_length = 3

    def __init__(self, n_symbols: int = 16) -> None:
        super().__init__()
        self.n_symbols = _symbols(n_symbols)
        self.sep = self._add(["|"])
        self.first = self._add(_symbol_names(self.n_symbols, ""))

    def _layout(self, length: int) -> Tuple[int, int]:
        k = (length - 1) // 2
        return k, length + 1 - (2 * k + 2)

    def _smallest(self) -> str:
        return "<bos> x | x"

    def _content(self, x: np.ndarray) -> np.ndarray:
        return x

    def _sequences(
        self, n: int, size: int, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        x = rng.integers(0, self.n_symbols, size=(n, size)) + self.first
        seq = _cat(_column(n, BOS), x, _column(n, self.sep), self._content(x))
        return seq, _answer_mask(n, seq.shape[1], size + 2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_symbols={self.n_symbols})"


class Reverse(Copy):
    """Reverse the input after a separator.

    Layout: ``<bos> x_1 .. x_k | x_k .. x_1``, as :class:`Copy` (the same
    ``k``, padding and ``min_length`` of 3), the answer reversed; the loss is
    on every token after ``|``.

    Examples
    --------
    >>> import numpy as np
    >>> task = Reverse(n_symbols=4)
    >>> print(task.render(task.batch(1, 7, np.random.default_rng(1))))
    <bos> b c d | [d] [c] [b]
    """

    name = "reverse"

    def _content(self, x: np.ndarray) -> np.ndarray:
        return x[:, ::-1]


class Counting(Task):
    """Count the occurrences of a query symbol.

    Layout: ``<bos> q | x_1 .. x_m = d_1 .. d_D``: a query symbol ``q`` and
    ``m`` symbols, all drawn uniformly from `n_symbols`; the answer is how
    many of ``x_1 .. x_m`` equal ``q``, in decimal, most significant digit
    first, zero-padded to ``D = len(str(m))`` digits (every count fits, and
    the width is fixed by the length alone).  The loss is on the ``D``
    digits.  ``m`` is the largest with ``4 + m + D <= length + 1``; what is
    left (a token when ``D`` grows by one) is a pad before ``<bos>``.
    ``min_length`` is 5 (``m = 1``).

    Examples
    --------
    >>> import numpy as np
    >>> task = Counting(n_symbols=3)
    >>> print(task.render(task.batch(1, 14, np.random.default_rng(0))))
    <bos> c | b b a a a a a a c = [1]
    """

    name = "counting"
    min_length = 5

    def __init__(self, n_symbols: int = 8) -> None:
        super().__init__()
        self.n_symbols = _symbols(n_symbols)
        self.sep = self._add(["|"])
        self.eq = self._add(["="])
        self.digit0 = self._add([str(d) for d in range(10)])
        self.first = self._add(_symbol_names(self.n_symbols, ""))

    def _smallest(self) -> str:
        return "<bos> q | x = d"

    def _layout(self, length: int) -> Tuple[int, int]:
        m = length - 4
        while m + len(str(m)) > length - 3:
            m -= 1
        return m, length + 1 - (4 + m + len(str(m)))

    def _sequences(
        self, n: int, size: int, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        q = rng.integers(0, self.n_symbols, size=(n, 1))
        x = rng.integers(0, self.n_symbols, size=(n, size))
        count = (x == q).sum(axis=1)
        width = len(str(size))
        digits = (count[:, None] // 10 ** np.arange(width - 1, -1, -1)) % 10
        seq = _cat(
            _column(n, BOS),
            q + self.first,
            _column(n, self.sep),
            x + self.first,
            _column(n, self.eq),
            digits + self.digit0,
        )
        return seq, _answer_mask(n, seq.shape[1], seq.shape[1] - width)

    def __repr__(self) -> str:
        return f"Counting(n_symbols={self.n_symbols})"


class SelectiveCopy(Task):
    """Copy the data tokens scattered among blanks, in their order.

    Layout: ``<bos> r_1 .. r_m | y_1 .. y_k``: a region of ``m`` cells, ``k``
    of them (at distinct positions drawn uniformly) holding data symbols
    drawn from `n_symbols`, the others the blank ``.``; the answer
    ``y_1 .. y_k`` is the data symbols in the order they stand in the
    region, and carries the loss.  ``m + k = length - 1``, with ``k`` either
    `n_tokens` (fixed: longer sequences have longer stretches of blanks,
    as in the selective copying task of Gu & Dao 2023) or, when `n_tokens`
    is None, ``max(1, floor((length - 1) * density / (1 + density)))``
    (``k / m`` about `density`).  No padding is needed.  ``min_length`` is
    3, or ``2 * n_tokens + 1`` (``m >= k``).

    Examples
    --------
    >>> import numpy as np
    >>> task = SelectiveCopy(n_symbols=4, n_tokens=3)
    >>> print(task.render(task.batch(1, 11, np.random.default_rng(0))))
    <bos> . d c c . . . | [d] [c] [c]
    """

    name = "selective_copy"

    def __init__(
        self, n_symbols: int = 16, density: float = 0.25, n_tokens: Optional[int] = None
    ) -> None:
        super().__init__()
        self.n_symbols = _symbols(n_symbols)
        density = _validate.real(density, "density")
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        self.density = density
        if n_tokens is not None:
            n_tokens = _validate.integer(n_tokens, "n_tokens", minimum=1)
        self.n_tokens = n_tokens
        self.min_length = 3 if n_tokens is None else 2 * n_tokens + 1
        self.sep = self._add(["|"])
        self.blank = self._add(["."])
        self.first = self._add(_symbol_names(self.n_symbols, ""))

    def _smallest(self) -> str:
        return "a region of at least as many cells as data tokens"

    def _layout(self, length: int) -> Tuple[Tuple[int, int], int]:
        budget = length - 1
        if self.n_tokens is not None:
            k = self.n_tokens
        else:
            k = max(1, int(budget * self.density // (1 + self.density)))
        return (budget - k, k), 0

    def _sequences(
        self, n: int, size: Tuple[int, int], rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        m, k = size
        # k distinct cells of the region, in order: the first k of a random permutation
        cells = np.sort(np.argsort(rng.random((n, m)), axis=1, kind="stable")[:, :k], axis=1)
        data = rng.integers(0, self.n_symbols, size=(n, k)) + self.first
        region = np.full((n, m), self.blank, dtype=np.int64)
        np.put_along_axis(region, cells, data, axis=1)
        seq = _cat(_column(n, BOS), region, _column(n, self.sep), data)
        return seq, _answer_mask(n, seq.shape[1], m + 2)

    def __repr__(self) -> str:
        return (
            f"SelectiveCopy(n_symbols={self.n_symbols}, density={self.density}, "
            f"n_tokens={self.n_tokens})"
        )


#: The flip-flop variants of Liu et al. 2023 by name: the probability of an
#: ignore instruction (writes and reads share the rest equally).
FLIP_FLOP_VARIANTS: Dict[str, float] = {"train": 0.8, "sparse": 0.98, "dense": 0.1}


class FlipFlop(Task):
    """The flip-flop language (Liu et al. 2023, "Exposing Attention Glitches
    with Flip-Flop Language Modeling").

    Layout: ``<bos> o_1 b_1 o_2 b_2 .. o_P b_P``: ``P = length // 2`` pairs
    of an instruction ``o`` (``w`` write, ``i`` ignore, ``r`` read) and a bit
    ``b``.  The first instruction is ``w``, the last ``r``, the others drawn
    independently: ``i`` with probability `p_ignore`, ``w`` and ``r`` with
    ``(1 - p_ignore) / 2`` each.  The bit after ``w`` or ``i`` is uniform;
    the bit after ``r`` is the bit of the last ``w`` before it, and only
    those read bits carry the loss (the other tokens are random: nothing can
    be asked of them).  An odd `length` leaves one token, a pad before
    ``<bos>``.  ``min_length`` is 4 (``w b r b``).

    `p_ignore` is a probability or the name of one of the paper's variants
    (:data:`FLIP_FLOP_VARIANTS`): ``"train"`` (0.8, the training
    distribution, FFL(0.8)), ``"sparse"`` (0.98: long stretches of ignores
    between a write and its read) or ``"dense"`` (0.1: mostly writes and
    reads).

    Examples
    --------
    >>> import numpy as np
    >>> task = FlipFlop("dense")
    >>> print(task.render(task.batch(1, 12, np.random.default_rng(3))))
    <bos> w 1 w 0 r [0] r [0] w 1 r [1]
    """

    name = "flip_flop"
    min_length = 4

    def __init__(self, p_ignore: Union[float, str] = 0.8) -> None:
        super().__init__()
        if isinstance(p_ignore, str):
            if p_ignore not in FLIP_FLOP_VARIANTS:
                raise ValueError(
                    f"p_ignore must be a probability or one of {sorted(FLIP_FLOP_VARIANTS)}, "
                    f"got {p_ignore!r}"
                )
            p_ignore = FLIP_FLOP_VARIANTS[p_ignore]
        p = _validate.real(p_ignore, "p_ignore")
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p_ignore must be in [0, 1) (reads must occur), got {p}")
        self.p_ignore = p
        self.write = self._add(["w", "i", "r"])
        self.bit0 = self._add(["0", "1"])

    def _smallest(self) -> str:
        return "w b r b"

    def _layout(self, length: int) -> Tuple[int, int]:
        pairs = length // 2
        return pairs, length - 2 * pairs

    def _sequences(
        self, n: int, size: int, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        p_other = (1.0 - self.p_ignore) / 2.0
        ops = rng.choice(3, size=(n, size), p=[p_other, self.p_ignore, p_other])
        ops[:, 0] = 0
        ops[:, -1] = 2
        bits = rng.integers(0, 2, size=(n, size))
        written = np.where(ops == 0, np.arange(size), -1)
        last_write = np.maximum.accumulate(written, axis=1)  # >= 0: ops[:, 0] writes
        bits = np.where(ops == 2, np.take_along_axis(bits, last_write, axis=1), bits)
        seq = np.empty((n, 1 + 2 * size), dtype=np.int64)
        seq[:, 0] = BOS
        seq[:, 1::2] = ops + self.write
        seq[:, 2::2] = bits + self.bit0
        answer = np.zeros(seq.shape, dtype=bool)
        answer[:, 2::2] = ops == 2
        return seq, answer

    def __repr__(self) -> str:
        return f"FlipFlop(p_ignore={self.p_ignore})"


class AssociativeRecall(Task):
    """Recall the value bound to a key.

    Layout: ``<bos> k_1 v_1 .. k_P v_P | q_1 a_1 .. q_Q a_Q``: ``P`` bindings
    of a key (drawn uniformly, with replacement, from `n_keys`) to a value
    (from `n_values`), then ``Q = n_queries`` queries, each a key of one of
    the bindings (drawn uniformly among the ``P``) followed by its answer:
    the value of the *last* binding of that key (a key bound twice is
    rebound, as in a dictionary; with few bindings keys are mostly
    distinct).  The answers carry the loss.  ``P = (length - 1 - 2 Q) // 2``;
    an even ``length - 1 - 2 Q`` leaves nothing, an odd one a pad before
    ``<bos>``.  ``min_length`` is ``2 Q + 3`` (``P = 1``).

    Examples
    --------
    >>> import numpy as np
    >>> task = AssociativeRecall(n_keys=4, n_values=4)
    >>> print(task.render(task.batch(1, 12, np.random.default_rng(2))))
    <bos> k3 v1 k1 v3 k0 v1 k1 v0 | k1 [v0]
    """

    name = "associative_recall"

    def __init__(self, n_keys: int = 16, n_values: int = 16, n_queries: int = 1) -> None:
        super().__init__()
        self.n_keys = _validate.integer(n_keys, "n_keys", minimum=1)
        self.n_values = _validate.integer(n_values, "n_values", minimum=1)
        self.n_queries = _validate.integer(n_queries, "n_queries", minimum=1)
        self.min_length = 2 * self.n_queries + 3
        self.sep = self._add(["|"])
        self.key0 = self._add(_symbol_names(self.n_keys, "k"))
        self.value0 = self._add(_symbol_names(self.n_values, "v"))

    def _smallest(self) -> str:
        return "one binding and the queries"

    def _layout(self, length: int) -> Tuple[int, int]:
        room = length - 1 - 2 * self.n_queries
        pairs = room // 2
        return pairs, room - 2 * pairs

    def _sequences(
        self, n: int, size: int, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        keys = rng.integers(0, self.n_keys, size=(n, size))
        values = rng.integers(0, self.n_values, size=(n, size))
        asked = rng.integers(0, size, size=(n, self.n_queries))
        query = np.take_along_axis(keys, asked, axis=1)
        # the last binding of each queried key: the largest index j with keys[j] == query
        match = keys[:, None, :] == query[:, :, None]  # (n, Q, P)
        last = size - 1 - np.argmax(match[:, :, ::-1], axis=2)
        answer = np.take_along_axis(values, last, axis=1)
        seq = np.empty((n, 2 + 2 * size + 2 * self.n_queries), dtype=np.int64)
        seq[:, 0] = BOS
        seq[:, 1 : 1 + 2 * size : 2] = keys + self.key0
        seq[:, 2 : 2 + 2 * size : 2] = values + self.value0
        start = 1 + 2 * size
        seq[:, start] = self.sep
        seq[:, start + 1 :: 2] = query + self.key0
        seq[:, start + 2 :: 2] = answer + self.value0
        mask = np.zeros(seq.shape, dtype=bool)
        mask[:, start + 2 :: 2] = True
        return seq, mask

    def __repr__(self) -> str:
        return (
            f"AssociativeRecall(n_keys={self.n_keys}, n_values={self.n_values}, "
            f"n_queries={self.n_queries})"
        )


class Addition(Task):
    """Add two numbers, digit by digit.

    Layout: ``<bos> a + b = c``: ``a`` and ``b`` have ``D`` decimal digits
    each (each digit uniform, leading zeros allowed: every ``D``-digit
    string is as likely), ``c = a + b`` has ``D + 1`` (a leading zero when
    there is no final carry), so ``3 D + 4`` tokens; ``D = (length - 3) // 3``
    and the 0 to 2 tokens left are pads before ``<bos>``.  The loss is on
    the ``D + 1`` digits of ``c``.  ``min_length`` is 6 (``D = 1``).

    With ``reverse=True`` (the default) all three numbers are written least
    significant digit first, the order in which the carries flow, so each
    digit of the sum depends only on digits already read and written (the
    reversed format of Lee et al. 2023 and Zhou et al. 2024, with which
    Transformers learn addition and generalize in length more readily); with
    ``reverse=False`` they are written as usual, most significant first.

    Examples
    --------
    >>> import numpy as np
    >>> task = Addition()
    >>> print(task.render(task.batch(1, 12, np.random.default_rng(0))))
    <bos> 8 6 5 + 2 3 0 = [0] [0] [6] [0]
    >>> print(Addition(reverse=False).render(
    ...     Addition(reverse=False).batch(1, 12, np.random.default_rng(0))))
    <bos> 5 6 8 + 0 3 2 = [0] [6] [0] [0]

    (568 + 32 = 600: the first line reads each number from the right.)
    """

    name = "addition"
    min_length = 6

    def __init__(self, reverse: bool = True) -> None:
        super().__init__()
        if not isinstance(reverse, (bool, np.bool_)):
            raise TypeError(f"reverse must be a bool, not {type(reverse).__name__}")
        self.reverse = bool(reverse)
        self.plus = self._add(["+"])
        self.eq = self._add(["="])
        self.digit0 = self._add([str(d) for d in range(10)])

    def _smallest(self) -> str:
        return "<bos> a + b = c c with one-digit a and b"

    def _layout(self, length: int) -> Tuple[int, int]:
        digits = (length - 3) // 3
        return digits, length - 3 - 3 * digits

    def _sequences(
        self, n: int, size: int, rng: np.random.Generator
    ) -> Tuple[np.ndarray, np.ndarray]:
        # little-endian digits: column j is the digit of 10**j
        a = rng.integers(0, 10, size=(n, size))
        b = rng.integers(0, 10, size=(n, size))
        c = np.empty((n, size + 1), dtype=np.int64)
        carry = np.zeros(n, dtype=np.int64)
        for j in range(size):
            total = a[:, j] + b[:, j] + carry
            c[:, j] = total % 10
            carry = total // 10
        c[:, size] = carry
        if not self.reverse:
            a, b, c = a[:, ::-1], b[:, ::-1], c[:, ::-1]
        seq = _cat(
            _column(n, BOS),
            a + self.digit0,
            _column(n, self.plus),
            b + self.digit0,
            _column(n, self.eq),
            c + self.digit0,
        )
        return seq, _answer_mask(n, seq.shape[1], seq.shape[1] - (size + 1))

    def __repr__(self) -> str:
        return f"Addition(reverse={self.reverse})"


#: The tasks by name.
TASKS: Dict[str, Type[Task]] = {
    task.name: task
    for task in (Copy, Reverse, Counting, SelectiveCopy, FlipFlop, AssociativeRecall, Addition)
}


# ------------------------------------------------------------- exact match


def _int_pair(predictions: Any, targets: Any) -> Tuple[np.ndarray, np.ndarray]:
    preds = np.asarray(predictions)
    tgts = np.asarray(targets)
    for array, name in ((preds, "predictions"), (tgts, "targets")):
        if array.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n, length), got shape {array.shape}")
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(
                f"{name} must hold integer token ids (the argmax of the logits), not {array.dtype}"
            )
    if preds.shape != tgts.shape:
        raise ValueError(
            f"predictions and targets must have the same shape, got {preds.shape} and {tgts.shape}"
        )
    return preds, tgts


def exact_match(predictions: Any, targets: Any) -> np.ndarray:
    """1.0 for each row whose every scored position is predicted, else 0.0.

    Parameters
    ----------
    predictions : int array (n, length)
        The model's argmax at each position of one teacher-forced forward
        pass (``logits.argmax(-1)``).
    targets : int array (n, length)
        A :class:`TaskBatch`'s targets: :data:`IGNORE` where nothing is
        asked.

    Returns
    -------
    numpy.ndarray
        float64 of shape ``(n,)``, 0.0 or 1.0.  This is also the exact match
        of greedy decoding (the module's docstring says why).

    Raises
    ------
    ValueError
        For a row of `targets` with no scored position (nothing to match).
    """
    preds, tgts = _int_pair(predictions, targets)
    scored = tgts != IGNORE
    empty = ~scored.any(axis=1)
    if empty.any():
        raise ValueError(
            f"targets: row {int(np.argmax(empty))} has no scored position "
            f"(every target is {IGNORE}), so it has nothing to match"
        )
    return np.all((preds == tgts) | ~scored, axis=1).astype(np.float64)


def greedy_decode(next_token: Callable[[np.ndarray], np.ndarray], batch: TaskBatch) -> np.ndarray:
    """The answers a causal model writes itself, one token at a time.

    At each position ``t`` that carries a loss in some row,
    ``next_token(tokens[:, :t + 1])`` gives the model's next token for each
    row (an int array of shape ``(n,)``); in the rows where ``t`` is scored,
    that token becomes the input at ``t + 1`` in place of the true one.  The
    inputs at the other positions stay the given ones.

    Returns the predictions, int64 of shape ``(n, length)`` (:data:`IGNORE`
    where nothing is scored), to give :func:`exact_match`:
    ``exact_match(greedy_decode(f, batch), batch.targets)`` equals
    ``exact_match(teacher_forced_argmax, batch.targets)`` for a causal
    model (the module's docstring says why).
    """
    tokens = np.array(batch.tokens, dtype=np.int64, copy=True)
    targets = np.asarray(batch.targets)
    preds = np.full(tokens.shape, IGNORE, dtype=np.int64)
    n, length = tokens.shape
    for t in np.flatnonzero((targets != IGNORE).any(axis=0)):
        step = np.asarray(next_token(tokens[:, : t + 1]))
        if step.shape != (n,):
            raise ValueError(f"next_token must return shape ({n},), got {step.shape}")
        rows = targets[:, t] != IGNORE
        preds[rows, t] = step[rows]
        if t + 1 < length:
            tokens[rows, t + 1] = step[rows]
    return preds
