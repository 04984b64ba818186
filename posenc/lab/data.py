"""Text and text-classification data for the lab, as NumPy arrays.

* :func:`load_text`: a text (a local file, a folder of files, or a data set
  through the ``datasets`` library) as a stream of token ids, split into a
  training and a validation part; :func:`lm_batch` draws random training
  windows from a stream, :func:`lm_windows` walks it for evaluation.
* :func:`load_classification`: the text-classification sets of Wang & Chen
  2020 (SST-2, TREC, SUBJ, CR, MR, MPQA) by name, or a local CSV or JSONL
  file, as padded word ids and labels; :data:`PUBLISHED` is the place for
  that paper's table.

Only NumPy is needed for local files with the byte-level tokenizer;
``datasets`` (a data set by name) and ``transformers`` (a named tokenizer)
are imported when used, and come with posenc's ``lab`` extra
(``pip install "posenc[lab]"``).

The tokenizers: ``tokenizer="bytes"`` (the default) reads a text as its UTF-8 bytes: the
ids are the byte values, the vocabulary has 256 entries, and the ids give
the text back exactly (``bytes(ids.astype(np.uint8)).decode()``).  Any other
string names a transformers tokenizer (a Hub name, read through the user's
Hugging Face cache, or a saved tokenizer's folder), loaded by
``AutoTokenizer.from_pretrained``; the text is encoded without special
tokens and the vocabulary is ``len(tokenizer)``.

The classification sets :func:`load_classification` reads by name, through
``datasets``, with the copy of each on the Hugging Face Hub and its columns
and splits:

========  ======================  ============  ================  ===========
name      Hub id                  text column   label column      splits
========  ======================  ============  ================  ===========
``sst2``  ``SetFit/sst2``         ``text``      ``label``         train, test
``trec``  ``SetFit/TREC-QC``      ``text``      ``label_coarse``  train, test
``subj``  ``SetFit/subj``         ``text``      ``label``         train, test
``cr``    ``SetFit/SentEval-CR``  ``text``      ``label``         train, test
``mr``    ``jxm/mr``              ``sentence``  ``label``         train, test
``mpqa``  ``jxm/mpqa``            ``sentence``  ``label``         train, test
========  ======================  ============  ================  ===========

SST-2 is the binary sentence-level set of SentEval (6920 training and 1821
test sentences; its 872 validation sentences are not read); TREC is the
6-class coarse question type (5452 and 500 questions); the MR and MPQA
copies hold 8662 and 8603 training and 2000 test sentences (and a ``dev``
split of 256, not read).  SUBJ, CR, MR and MPQA have no official test split
(SentEval scores them by 10-fold cross-validation); the Hub copies above
carry a fixed test split, which is used as it is.  A source with no test
split (a local file, or a ``datasets:`` source without one) is split with a
seed: a ``test_fraction`` of its rows, drawn by
``numpy.random.default_rng(seed)``, is the test set.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _validate
from ..probe._optional import require
from .tasks import IGNORE

__all__ = [
    "CLASSIFICATION_DATASETS",
    "PUBLISHED",
    "PUBLISHED_SOURCE",
    "ClassificationData",
    "HubDataset",
    "TextData",
    "lm_batch",
    "lm_windows",
    "load_classification",
    "load_text",
    "words",
]

PathLike = Union[str, "os.PathLike[str]"]


# ---------------------------------------------------------------- the text


class TextData(NamedTuple):
    """A text as token ids: ``train`` and ``valid`` (int64 streams),
    ``vocab_size`` (every id is below it), the ``tokenizer`` (``"bytes"``
    or the transformers tokenizer's name) and the ``source`` read."""

    train: np.ndarray
    valid: np.ndarray
    vocab_size: int
    tokenizer: str
    source: str


def _is_datasets(source: Any) -> bool:
    return isinstance(source, str) and source.startswith("datasets:")


def _read_utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"source: {path} is not UTF-8 text (byte {exc.start} is not); for a folder, "
            "choose its text files with pattern="
        ) from exc


def _join(documents: Sequence[str]) -> str:
    """The documents one after the other, a newline between two where the
    first does not end with one (a single document is kept as it is)."""
    parts: List[str] = []
    for doc in documents:
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(doc)
    return "".join(parts)


def _local_documents(source: PathLike, pattern: str) -> List[str]:
    path = Path(os.fspath(source))
    if path.is_file():
        return [_read_utf8(path)]
    if not path.is_dir():
        raise FileNotFoundError(f"source: no such file or folder: {path}")
    files = sorted(
        p
        for p in path.rglob(pattern)
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise ValueError(
            f"source: the folder {path} holds no file matching pattern={pattern!r} "
            "(hidden files and folders are skipped)"
        )
    return [_read_utf8(p) for p in files]


def _parse_datasets(source: str, parts_allowed: int) -> Tuple[str, Optional[str], Optional[str]]:
    """NAME, config and split of ``datasets:NAME[:config[:split]]`` (an
    empty config, ``datasets:NAME::split``, is none)."""
    parts = source[len("datasets:") :].split(":")
    last_empty = len(parts) > 1 and parts[-1] == ""
    if not parts[0] or len(parts) > parts_allowed or last_empty:
        form = "datasets:NAME[:config[:split]]" if parts_allowed == 3 else "datasets:NAME[:config]"
        raise ValueError(f"source must read {form}, got {source!r}")
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1] or None, parts[2] or None


def _open_dataset(source: str, name: str, config: Optional[str]) -> Any:
    """A DatasetDict (or a Dataset) of `name`: a folder saved by
    ``save_to_disk``, or anything ``datasets.load_dataset`` reads (a Hub
    name, a folder of data files)."""
    datasets = require("datasets", f"source={source!r}", extra="lab")
    folder = Path(name)
    saved = folder.is_dir() and any(
        (folder / f).is_file() for f in ("dataset_dict.json", "state.json")
    )
    if saved and config is not None:
        raise ValueError(f"source: {name} is a saved dataset, which has no config")
    try:
        if saved:
            return datasets.load_from_disk(str(folder))
        return datasets.load_dataset(name, config)
    except Exception as exc:  # the library's own errors: not found, no network, ...
        raise ValueError(
            f"source: datasets could not load {source!r} ({type(exc).__name__}: {exc})"
        ) from exc


def _split_of(source: str, data: Any, split: str, argument: str) -> Any:
    if not hasattr(data, "keys"):  # one Dataset, saved without splits
        raise ValueError(
            f"{argument}: {source!r} is a single dataset without splits, so it has no "
            f"split {split!r}; name no split"
        )
    if split not in data:
        raise ValueError(
            f"{argument}: {source!r} has no split {split!r} (its splits: {', '.join(data)})"
        )
    return data[split]


def _column_of(source: str, table: Any, column: str, argument: str) -> List[Any]:
    if column not in table.column_names:
        raise ValueError(
            f"{argument}: {source!r} has no column {column!r} "
            f"(its columns: {', '.join(table.column_names)})"
        )
    return list(table[column])


def _rows_as_text(source: str, rows: List[Any], column: str) -> str:
    for i, row in enumerate(rows):
        if not isinstance(row, str):
            raise ValueError(
                f"column: row {i} of {source!r} holds {type(row).__name__}, not text "
                f"(column={column!r})"
            )
    # one row a line: a row's own final newline is not doubled
    return "\n".join(row[:-1] if row.endswith("\n") else row for row in rows)


def _encode(text: str, tokenizer: str) -> Tuple[np.ndarray, int]:
    if tokenizer == "bytes":
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64), 256
    transformers = require("transformers", f"tokenizer={tokenizer!r}", extra="lab")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(tokenizer)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"tokenizer: {tokenizer!r} is neither 'bytes' nor a tokenizer transformers can "
            f"load (a Hub name or a saved tokenizer's folder): {exc}"
        ) from exc
    ids = tok(text, add_special_tokens=False, verbose=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64), len(tok)


def _cut(ids: np.ndarray, fraction: float, what: str) -> Tuple[np.ndarray, np.ndarray]:
    cut = int(round(len(ids) * fraction))
    if cut < 2 or len(ids) - cut < 2:
        raise ValueError(
            f"split={fraction} cuts {what} of {len(ids)} tokens into {cut} and "
            f"{len(ids) - cut}: each part needs at least 2 (a token and the next)"
        )
    return ids[:cut].copy(), ids[cut:].copy()


def load_text(
    source: PathLike,
    *,
    tokenizer: str = "bytes",
    split: Union[float, Tuple[str, str]] = 0.9,
    pattern: str = "*.txt",
    column: str = "text",
) -> TextData:
    """A text as a training and a validation stream of token ids.

    Parameters
    ----------
    source : str or path
        A text file; a folder (every file under it matching `pattern`, in
        sorted order, hidden ones skipped, a newline put between two files
        where the first does not end with one); or
        ``"datasets:NAME[:config[:split]]"`` (``"datasets:NAME::split"``
        names a split without a config), read by the ``datasets``
        library: NAME is a Hub name (``datasets:wikitext:wikitext-103-raw-v1``,
        for users with a network or a cached copy), a folder of data files
        (``datasets.load_dataset(folder)``) or a folder saved by
        ``save_to_disk``; the rows of its `column` are joined one a line.
        Local files must be UTF-8 (a ValueError names the one that is not).
    tokenizer : str
        ``"bytes"`` (the UTF-8 bytes, 256 ids) or a transformers tokenizer's
        Hub name or folder (the module's docstring says how it is used).
    split : float or (str, str)
        A fraction: the first ``split`` of the token stream is ``train``,
        the rest ``valid`` (a contiguous cut, as language-model benchmarks
        split; for a ``datasets:`` source its ``train`` split, or the split
        named in `source`, is cut).  Two split names, for a ``datasets:``
        source that names no split: those splits of the data set
        (``("train", "validation")``).
    pattern : str
        The files of a folder to read (a glob, matched in every subfolder).
    column : str
        The text column of a ``datasets:`` source.

    Returns
    -------
    TextData

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = tempfile.mkdtemp()
    >>> path = pathlib.Path(folder, "a.txt")
    >>> _ = path.write_text("hello, world\\n" * 10, encoding="utf-8")
    >>> data = load_text(path, split=0.5)
    >>> data.vocab_size, len(data.train), len(data.valid)
    (256, 65, 65)
    >>> bytes(data.train[:5].astype("uint8")).decode()
    'hello'
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a path or a string, not {type(source).__name__}")
    if not isinstance(tokenizer, str) or not tokenizer:
        raise TypeError(f"tokenizer must be 'bytes' or a tokenizer's name, got {tokenizer!r}")
    if not isinstance(column, str):
        raise TypeError(f"column must be a string, not {type(column).__name__}")
    if isinstance(split, tuple):
        if len(split) != 2 or not all(isinstance(s, str) and s for s in split):
            raise ValueError(f"split must be a fraction or two split names, got {split!r}")
        if not _is_datasets(source) or _parse_datasets(str(source), 3)[2] is not None:
            raise ValueError(
                f"split={split!r}: split names are for a datasets: source that names no "
                "split; a file or folder (or a named split) is cut by a fraction"
            )
        fraction: Optional[float] = None
    else:
        fraction = _validate.real(split, "split")
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"split must be in (0, 1), got {fraction}")

    if _is_datasets(source):
        source = str(source)
        name, config, named_split = _parse_datasets(source, 3)
        data = _open_dataset(source, name, config)
        if fraction is None:
            assert isinstance(split, tuple)
            halves = []
            for which in split:
                rows = _column_of(source, _split_of(source, data, which, "split"), column, "column")
                halves.append(_encode(_rows_as_text(source, rows, column), tokenizer))
            (train, vocab), (valid, _) = halves
            if len(train) < 2 or len(valid) < 2:
                raise ValueError(
                    f"split={split!r}: the splits hold {len(train)} and {len(valid)} tokens; "
                    "each needs at least 2"
                )
            return TextData(train, valid, vocab, tokenizer, source)
        if named_split is not None:
            table = _split_of(source, data, named_split, "source")
        elif hasattr(data, "keys"):
            table = _split_of(source, data, "train", "split")
        else:
            table = data
        rows = _column_of(source, table, column, "column")
        ids, vocab = _encode(_rows_as_text(source, rows, column), tokenizer)
    else:
        if not isinstance(pattern, str) or not pattern:
            raise TypeError(f"pattern must be a glob such as '*.txt', got {pattern!r}")
        ids, vocab = _encode(_join(_local_documents(source, pattern)), tokenizer)
        source = os.fspath(source)
    assert fraction is not None
    train, valid = _cut(ids, fraction, "the text")
    return TextData(train, valid, vocab, tokenizer, str(source))


def _stream(ids: Any) -> np.ndarray:
    stream = np.asarray(ids)
    if stream.ndim != 1:
        raise ValueError(f"ids must be a 1-D stream of token ids, got shape {stream.shape}")
    if not np.issubdtype(stream.dtype, np.integer):
        raise TypeError(f"ids must hold integer token ids, not {stream.dtype}")
    return stream


def _fits(stream: np.ndarray, length: int) -> None:
    if len(stream) < length + 1:
        raise ValueError(
            f"length={length} needs a stream of at least {length + 1} tokens (a window and "
            f"the token after it), and ids has {len(stream)}"
        )


def lm_batch(
    ids: Any, n: int, length: int, rng: np.random.Generator
) -> Tuple[np.ndarray, np.ndarray]:
    """`n` random windows of a token stream, for training.

    Each window starts at a position drawn uniformly from those whose
    ``length + 1`` tokens lie in the stream; ``tokens`` are its first
    `length`, ``targets`` the same shifted by one (the next token at each
    position).

    Returns
    -------
    (tokens, targets) : int64 arrays of shape ``(n, length)``
    """
    stream = _stream(ids)
    n = _validate.integer(n, "n", minimum=1)
    length = _validate.integer(length, "length", minimum=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy Generator (numpy.random.default_rng(seed)), "
            f"not {type(rng).__name__}"
        )
    _fits(stream, length)
    starts = rng.integers(0, len(stream) - length, size=n)
    window = stream[starts[:, None] + np.arange(length + 1)].astype(np.int64)
    return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


def lm_windows(
    ids: Any, length: int, *, stride: Optional[int] = None
) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """The evaluation windows of a token stream: every token scored once.

    The windows start at ``0, stride, 2 * stride, ...`` (`stride` defaults to
    `length`: windows side by side, none overlapping); the last one is moved
    back to end at the end of the stream.  Each yields ``(tokens, targets)``,
    int64 of shape ``(length,)``, the targets being the next tokens, with
    ``-100`` where a token was already scored by an earlier window.  So
    every token but the first (``ids[1:]``) is scored exactly once: the first
    window scores all its positions, each later one only the tokens past the
    previous window's end, with at least ``length - stride`` tokens of
    context before them (all of them, in the last window, where it was
    moved back).

    Parameters
    ----------
    ids : 1-D int array
        The stream (``TextData.valid``, say).
    length : int
        The number of tokens the model sees.
    stride : int, optional
        The step between window starts, ``1 <= stride <= length``.
    """
    stream = _stream(ids)
    length = _validate.integer(length, "length", minimum=1)
    stride = length if stride is None else _validate.integer(stride, "stride", minimum=1)
    if stride > length:
        raise ValueError(
            f"stride must be <= length ({length}), got {stride}: a larger step would skip tokens"
        )
    _fits(stream, length)
    return _windows(stream, length, stride)


def _windows(
    stream: np.ndarray, length: int, stride: int
) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    last = len(stream) - 1  # the index of the last token, the last one to score
    start, scored = 0, 0  # scored: the index of the last token scored so far
    while scored < last:
        start = min(start, last - length)
        window = stream[start : start + length + 1].astype(np.int64)
        targets = window[1:].copy()
        # targets[j] is token start + 1 + j: those up to `scored` were scored
        targets[: max(0, scored - start)] = IGNORE
        yield window[:-1].copy(), targets
        scored = start + length
        start += stride


# ---------------------------------------------------------- classification


class HubDataset(NamedTuple):
    """Where a classification set is read from: the Hub id, its config, the
    text and label columns and the training and test splits."""

    hub_id: str
    config: Optional[str]
    text: str
    label: str
    train: str
    test: str


#: The classification sets by name (the module's docstring has the table).
CLASSIFICATION_DATASETS: Dict[str, HubDataset] = {
    "sst2": HubDataset("SetFit/sst2", None, "text", "label", "train", "test"),
    "trec": HubDataset("SetFit/TREC-QC", None, "text", "label_coarse", "train", "test"),
    "subj": HubDataset("SetFit/subj", None, "text", "label", "train", "test"),
    "cr": HubDataset("SetFit/SentEval-CR", None, "text", "label", "train", "test"),
    "mr": HubDataset("jxm/mr", None, "sentence", "label", "train", "test"),
    "mpqa": HubDataset("jxm/mpqa", None, "sentence", "label", "train", "test"),
}

#: The published accuracies (%) of Wang & Chen 2020 ("What Do Position
#: Embeddings Learn? An Empirical Study of Pre-Trained Language Model
#: Positional Encoding", EMNLP 2020, arXiv 2010.04903): dataset name (as
#: :data:`CLASSIFICATION_DATASETS`) -> embedding (``"random"``, ``"bert"``,
#: ``"roberta"``, ``"gpt2"``, ``"sinusoid"``) -> accuracy of their 1-layer
#: Transformer encoder.
#:
#: Empty: the paper's table could not be read where this module was written
#: (only the paper's abstract and introduction were at hand, no copy of the
#: table), and no figure is set here that was not read from it.
PUBLISHED: Dict[str, Dict[str, float]] = {}

#: Where :data:`PUBLISHED` comes from.
PUBLISHED_SOURCE = (
    "Wang & Chen 2020, What Do Position Embeddings Learn? An Empirical Study of Pre-Trained "
    "Language Model Positional Encoding, EMNLP 2020 (arXiv 2010.04903), text classification "
    "with a 1-layer Transformer encoder"
)


class ClassificationData(NamedTuple):
    """A text-classification set as arrays.

    ``train_x`` and ``test_x`` are int64 word ids of shape ``(rows,
    max_len)``, padded at the end with ``pad_id``; ``train_y`` and ``test_y``
    the int64 class of each row, ``0 .. n_classes - 1``.  ``vocab_size``
    counts the ids (``vocab[i]`` is the word of id ``i``: ``"<pad>"``, then
    ``"<unk>"`` for the words out of the vocabulary, then the words by
    frequency); ``labels[c]`` is the label class ``c`` stands for;
    ``truncated`` counts the rows longer than ``max_len`` (their first
    ``max_len`` words are kept)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    n_classes: int
    vocab_size: int
    pad_id: int
    name: str
    vocab: Tuple[str, ...] = ()
    labels: Tuple[Any, ...] = ()
    unk_id: int = 1
    truncated: int = 0


_WORD = re.compile(r"\w+|[^\w\s]")

Rows = Tuple[List[str], List[Any]]


def words(text: str, lowercase: bool = True) -> List[str]:
    """The words of `text` as :func:`load_classification` reads them: runs of
    letters, digits and underscores, and each other non-space character
    alone (``"Don't!"`` -> ``["don", "'", "t", "!"]``)."""
    return _WORD.findall(text.lower() if lowercase else text)


def _file_rows(path: Path, text_column: str, label_column: str) -> Rows:
    suffix = path.suffix.lower()
    records: List[Dict[str, Any]] = []
    with open(path, encoding="utf-8", newline="") as f:
        if suffix == ".csv":
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            records = list(reader)
        else:
            columns = []
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"source: line {number} of {path} is not JSON: {exc}") from exc
                if not isinstance(record, dict):
                    raise ValueError(f"source: line {number} of {path} is not a JSON object")
                records.append(record)
                columns.extend(k for k in record if k not in columns)
    for column, argument in ((text_column, "text_column"), (label_column, "label_column")):
        if column not in columns:
            raise ValueError(
                f"{argument}: {path} has no column {column!r} (its columns: "
                f"{', '.join(map(str, columns)) or 'none'})"
            )
    texts, labels = [], []
    for i, record in enumerate(records):
        text, label = record.get(text_column), record.get(label_column)
        if not isinstance(text, str):
            raise ValueError(f"text_column: row {i} of {path} has no text in {text_column!r}")
        if label is None or label == "":
            raise ValueError(f"label_column: row {i} of {path} has no label in {label_column!r}")
        texts.append(text)
        labels.append(label)
    if not texts:
        raise ValueError(f"source: {path} holds no rows")
    return texts, labels


_SUFFIXES = (".csv", ".jsonl")


def _local_splits(path: Path, text_column: str, label_column: str) -> Tuple[Rows, Optional[Rows]]:
    if path.is_dir():
        found = {
            split: [path / f"{split}{s}" for s in _SUFFIXES if (path / f"{split}{s}").is_file()]
            for split in ("train", "test")
        }
        if not found["train"]:
            raise ValueError(f"source: the folder {path} holds no train.csv or train.jsonl")
        train = _file_rows(found["train"][0], text_column, label_column)
        test = _file_rows(found["test"][0], text_column, label_column) if found["test"] else None
        return train, test
    if path.suffix.lower() not in _SUFFIXES:
        raise ValueError(f"source: {path} is neither a .csv nor a .jsonl file")
    return _file_rows(path, text_column, label_column), None


def _hub_splits(
    source: str,
    name: str,
    config: Optional[str],
    spec: Optional[HubDataset],
    text_column: str,
    label_column: str,
) -> Tuple[Rows, Optional[Rows]]:
    data = _open_dataset(source, name, config)
    train_split, test_split = (spec.train, spec.test) if spec else ("train", "test")
    if hasattr(data, "keys"):
        train_table = _split_of(source, data, train_split, "source")
        test_table = data[test_split] if test_split in data else None
    else:
        train_table, test_table = data, None

    def rows(table: Any) -> Rows:
        texts = _column_of(source, table, text_column, "text_column")
        labels = _column_of(source, table, label_column, "label_column")
        return texts, labels

    return rows(train_table), (rows(test_table) if test_table is not None else None)


def _label_classes(labels: Sequence[Any], where: str) -> Tuple[List[Any], Tuple[Any, ...]]:
    """The labels as values that order (integers where every label is one,
    or a string of one, as CSV holds them) and the sorted classes."""
    values: List[Any] = list(labels)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        values = [int(v) for v in values]
    elif all(isinstance(v, str) for v in values):
        if all(re.fullmatch(r"[+-]?\d+", v.strip()) for v in values):
            values = [int(v) for v in values]
    else:
        kinds = sorted({type(v).__name__ for v in values})
        raise ValueError(
            f"label_column: the labels of {where} mix {', '.join(kinds)}; they must be all "
            "integers or all strings"
        )
    return values, tuple(sorted(set(values)))


def load_classification(
    source: PathLike,
    *,
    max_len: int = 64,
    vocab_size: int = 20000,
    text_column: Optional[str] = None,
    label_column: Optional[str] = None,
    seed: int = 0,
    test_fraction: float = 0.1,
    lowercase: bool = True,
) -> ClassificationData:
    """A text-classification set as padded word ids and labels.

    Parameters
    ----------
    source : str or path
        A name of :data:`CLASSIFICATION_DATASETS` (``"sst2"``, ``"trec"``,
        ``"subj"``, ``"cr"``, ``"mr"``, ``"mpqa"``: read through the
        ``datasets`` library from the Hub, the module's docstring has the
        table); ``"datasets:NAME[:config]"`` (any data set ``datasets``
        reads, its ``train`` and, where it has one, ``test`` split); a local
        ``.csv`` (with a header row) or ``.jsonl`` file (one JSON object a
        line); or a folder holding ``train.csv`` or ``train.jsonl`` and, if
        it has one, ``test.csv`` or ``test.jsonl``.
    max_len : int
        The number of word ids a row holds: longer texts keep their first
        `max_len` words, shorter ones are padded at the end with ``pad_id``
        (0).
    vocab_size : int
        The largest vocabulary: ``<pad>`` (0), ``<unk>`` (1) and the
        ``vocab_size - 2`` most frequent words of the training split (ties
        in the order of the words' text); fewer where the training split has
        fewer distinct words.  Other words read as ``<unk>``.
    text_column, label_column : str, optional
        The columns to read (default ``"text"`` and ``"label"``; a named set
        has its own, see the table).
    seed, test_fraction
        Where the source has no test split: a `test_fraction` of its rows,
        drawn by ``numpy.random.default_rng(seed)``, is the test set (the
        rest, in their order, the training set).
    lowercase : bool
        Read the words in lower case.

    Returns
    -------
    ClassificationData
        The labels are numbered in their sorted order (numbers by value,
        strings alphabetically), over the training and test rows together.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp(), "toy.csv")
    >>> _ = path.write_text("text,label\\nGood film,pos\\nBad film!,neg\\n", encoding="utf-8")
    >>> data = load_classification(path, max_len=4, test_fraction=0.5)
    >>> data.n_classes, data.labels, data.vocab_size
    (2, ('neg', 'pos'), 5)
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a name or a path, not {type(source).__name__}")
    max_len = _validate.integer(max_len, "max_len", minimum=1)
    vocab_size = _validate.integer(vocab_size, "vocab_size", minimum=3)
    seed = _validate.integer(seed, "seed", minimum=0)
    test_fraction = _validate.real(test_fraction, "test_fraction")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    for value, argument in ((text_column, "text_column"), (label_column, "label_column")):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{argument} must be a string, not {type(value).__name__}")

    key = source.lower() if isinstance(source, str) else None
    spec = CLASSIFICATION_DATASETS.get(key) if key else None
    if spec is not None:
        name = key or ""
        train, test = _hub_splits(
            f"{source} ({spec.hub_id})",
            spec.hub_id,
            spec.config,
            spec,
            text_column or spec.text,
            label_column or spec.label,
        )
    elif _is_datasets(source):
        source = str(source)
        name, config, _ = _parse_datasets(source, 2)
        train, test = _hub_splits(
            source,
            name,
            config,
            None,
            text_column or "text",
            label_column or "label",
        )
    else:
        path = Path(os.fspath(source))
        if not path.exists():
            if (
                isinstance(source, str)
                and path.suffix.lower() not in _SUFFIXES
                and (os.sep not in source and "/" not in source)
            ):
                raise ValueError(
                    f"source: {source!r} is not a classification set "
                    f"({', '.join(CLASSIFICATION_DATASETS)}), 'datasets:NAME' or a file"
                )
            raise FileNotFoundError(f"source: no such file or folder: {path}")
        name = path.stem
        train, test = _local_splits(path, text_column or "text", label_column or "label")

    if test is None:
        count = len(train[0])
        n_test = int(round(count * test_fraction))
        if n_test < 1 or n_test >= count:
            raise ValueError(
                f"test_fraction={test_fraction} of {count} rows leaves {n_test} for the test "
                "set and the rest for training: each needs at least one"
            )
        order = np.random.default_rng(seed).permutation(count)
        is_test = np.zeros(count, dtype=bool)
        is_test[order[:n_test]] = True
        texts, labels = train
        test = ([t for t, x in zip(texts, is_test) if x], [y for y, x in zip(labels, is_test) if x])
        train = (
            [t for t, x in zip(texts, is_test) if not x],
            [y for y, x in zip(labels, is_test) if not x],
        )

    values, classes = _label_classes(list(train[1]) + list(test[1]), name)
    index = {c: i for i, c in enumerate(classes)}
    train_y = np.array([index[v] for v in values[: len(train[1])]], dtype=np.int64)
    test_y = np.array([index[v] for v in values[len(train[1]) :]], dtype=np.int64)

    train_words = [words(t, lowercase) for t in train[0]]
    test_words = [words(t, lowercase) for t in test[0]]
    counts = Counter(w for ws in train_words for w in ws)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - 2]
    vocab = ("<pad>", "<unk>", *ranked)
    ids = {w: i for i, w in enumerate(vocab)}

    def encode(rows: List[List[str]]) -> np.ndarray:
        out = np.zeros((len(rows), max_len), dtype=np.int64)
        for r, ws in enumerate(rows):
            row = [ids.get(w, 1) for w in ws[:max_len]]
            out[r, : len(row)] = row
        return out

    truncated = sum(len(ws) > max_len for ws in train_words + test_words)
    return ClassificationData(
        encode(train_words),
        train_y,
        encode(test_words),
        test_y,
        len(classes),
        len(vocab),
        0,
        name,
        vocab,
        classes,
        1,
        truncated,
    )
