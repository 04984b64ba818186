"""posenc.lab.data: texts and classification sets read as documented.

The witnesses are the files the tests write themselves: a text's UTF-8
bytes (the byte tokenizer gives them back), windows located in a stream of
``arange`` ids, vocabularies and padded rows worked out by hand, a seeded
split redrawn with NumPy, and the ``datasets`` library reading local files
(no network: skipped where ``datasets`` is not installed).
"""

import doctest
import json
import sys
import types

import numpy as np
import pytest
from optional import require

from posenc.lab import data
from posenc.lab.data import (
    CLASSIFICATION_DATASETS,
    PUBLISHED,
    lm_batch,
    lm_windows,
    load_classification,
    load_text,
)

TEXT = "Position, position, position.\nCafé — 東京 ✓\n"


# ------------------------------------------------------------------ texts


def test_bytes_round_trip_through_a_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes(TEXT.encode("utf-8"))
    out = load_text(path, split=0.75)
    raw = TEXT.encode("utf-8")
    assert out.vocab_size == 256 and out.tokenizer == "bytes" and out.source == str(path)
    assert out.train.dtype == out.valid.dtype == np.int64
    assert len(out.train) == round(len(raw) * 0.75)
    both = np.concatenate([out.train, out.valid])
    assert bytes(both.astype(np.uint8)) == raw
    assert bytes(both.astype(np.uint8)).decode("utf-8") == TEXT
    assert load_text(str(path), split=0.75).train.tolist() == out.train.tolist()


def test_a_folder_is_its_matching_files_in_sorted_order(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "b.txt").write_text("second\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first", encoding="utf-8")  # no final newline
    (tmp_path / "sub" / "c.txt").write_text("third\n", encoding="utf-8")
    (tmp_path / ".hidden" / "d.txt").write_text("hidden\n", encoding="utf-8")
    (tmp_path / ".e.txt").write_text("hidden\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("markdown\n", encoding="utf-8")
    out = load_text(tmp_path, split=0.5)
    text = bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)).decode()
    assert text == "first\nsecond\nthird\n"
    out = load_text(tmp_path, split=0.5, pattern="*.md")
    assert bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)) == b"markdown\n"


def test_text_errors_name_their_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="^source: no such file or folder"):
        load_text(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="^source: the folder .* holds no file matching"):
        load_text(tmp_path)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"^source: .*latin1.txt is not UTF-8 text \(byte 3"):
        load_text(tmp_path)
    good = tmp_path / "good.md"
    good.write_text("some text to cut\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^split must be in \(0, 1\)"):
        load_text(good, split=1.0)
    with pytest.raises(ValueError, match=r"^split=0.01 cuts the text of 17 tokens"):
        load_text(good, split=0.01)
    with pytest.raises(ValueError, match=r"^split=\('train', 'validation'\): split names are"):
        load_text(good, split=("train", "validation"))
    with pytest.raises(TypeError, match="^source must be a path"):
        load_text(3)
    with pytest.raises(ValueError, match=r"^source must read datasets:NAME\[:config\[:split\]\]"):
        load_text("datasets:a:b:c:d")
    with pytest.raises(ValueError, match=r"^source must read datasets:NAME\[:config\]"):
        load_classification("datasets:a:b:c")


def test_without_datasets_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"needs datasets, .*pip install \"posenc\[lab\]\""):
        load_text("datasets:wikitext:wikitext-103-raw-v1")
    with pytest.raises(ImportError, match=r"pip install \"posenc\[lab\]\""):
        load_classification("sst2")


def test_a_named_tokenizer_from_a_folder(tmp_path):
    transformers = require("transformers")
    tokenizers = require("tokenizers")
    vocab = {"<unk>": 0, "position": 1, "café": 2, "east": 3, ",": 4}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(
        tmp_path / "tok"
    )
    path = tmp_path / "t.txt"
    path.write_text("position café , east position nowhere café east", encoding="utf-8")
    out = load_text(path, tokenizer=str(tmp_path / "tok"), split=0.5)
    assert out.vocab_size == 5 and out.tokenizer == str(tmp_path / "tok")
    assert np.concatenate([out.train, out.valid]).tolist() == [1, 2, 4, 3, 1, 0, 2, 3]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="^tokenizer: .* is neither 'bytes' nor a tokenizer"):
        load_text(path, tokenizer=str(tmp_path / "empty"))


# ------------------------------------------------------------------ windows


def test_lm_batch_draws_windows_of_the_stream():
    ids = np.arange(50)
    rng = np.random.default_rng(0)
    tokens, targets = lm_batch(ids, 400, 8, rng)
    assert tokens.shape == targets.shape == (400, 8) and tokens.dtype == np.int64
    starts = tokens[:, 0]
    np.testing.assert_array_equal(tokens, starts[:, None] + np.arange(8))
    np.testing.assert_array_equal(targets, tokens + 1)
    # every start whose window and next token lie in the stream, and no other
    assert set(starts.tolist()) == set(range(50 - 8))
    again = lm_batch(ids, 400, 8, np.random.default_rng(0))
    np.testing.assert_array_equal(again[0], tokens)
    # the whole stream as one window
    tokens, targets = lm_batch(ids, 2, 49, rng)
    assert tokens[0].tolist() == list(range(49)) and targets[1].tolist() == list(range(1, 50))


def test_lm_windows_side_by_side_the_last_moved_back():
    ids = np.arange(10)
    windows = [(t.tolist(), y.tolist()) for t, y in lm_windows(ids, 4)]
    assert windows == [
        ([0, 1, 2, 3], [1, 2, 3, 4]),
        ([4, 5, 6, 7], [5, 6, 7, 8]),
        ([5, 6, 7, 8], [-100, -100, -100, 9]),  # moved back: only token 9 is new
    ]
    # a stream that the windows fill exactly: no window moved back
    windows = [(t.tolist(), y.tolist()) for t, y in lm_windows(np.arange(9), 4)]
    assert windows == [([0, 1, 2, 3], [1, 2, 3, 4]), ([4, 5, 6, 7], [5, 6, 7, 8])]


def test_lm_windows_with_a_stride():
    windows = [(t.tolist(), y.tolist()) for t, y in lm_windows(np.arange(9), 4, stride=2)]
    assert windows == [
        ([0, 1, 2, 3], [1, 2, 3, 4]),
        ([2, 3, 4, 5], [-100, -100, 5, 6]),
        ([4, 5, 6, 7], [-100, -100, 7, 8]),
    ]


@pytest.mark.parametrize("n", [6, 7, 17, 64, 101])
@pytest.mark.parametrize("length,stride", [(4, None), (4, 1), (4, 3), (5, 5), (1, None)])
def test_lm_windows_score_every_token_once(n, length, stride):
    ids = np.arange(n) * 3  # ids that tell their position
    scored = []
    for tokens, targets in lm_windows(ids, length, stride=stride):
        assert tokens.shape == targets.shape == (length,)
        start = tokens[0] // 3
        np.testing.assert_array_equal(tokens, ids[start : start + length])
        keep = targets != -100
        np.testing.assert_array_equal(targets[keep], ids[start + 1 : start + length + 1][keep])
        # the scored positions are the window's last ones
        assert keep[np.argmax(keep) :].all()
        scored.extend((targets[keep] // 3).tolist())
    assert scored == list(range(1, n))


def test_window_errors_name_their_argument():
    ids = np.arange(10)
    with pytest.raises(ValueError, match="^length=10 needs a stream of at least 11 tokens"):
        lm_windows(ids, 10)
    with pytest.raises(ValueError, match="^length=10 needs a stream"):
        lm_batch(ids, 1, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"^stride must be <= length \(4\)"):
        lm_windows(ids, 4, stride=5)
    with pytest.raises(ValueError, match="^stride must be >= 1"):
        lm_windows(ids, 4, stride=0)
    with pytest.raises(ValueError, match="^ids must be a 1-D stream"):
        lm_windows(ids.reshape(2, 5), 4)
    with pytest.raises(TypeError, match="^ids must hold integer token ids"):
        lm_batch(ids.astype(float), 1, 4, np.random.default_rng(0))
    with pytest.raises(TypeError, match="^rng must be a numpy Generator"):
        lm_batch(ids, 1, 4, 0)
    with pytest.raises(ValueError, match="^n must be >= 1"):
        lm_batch(ids, 0, 4, np.random.default_rng(0))


# ---------------------------------------------------------- classification


def write_csv(path, rows, header=("text", "label")):
    lines = [",".join(header)] + [",".join(f'"{c}"' for c in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_csv_folder_by_hand(tmp_path):
    write_csv(
        tmp_path / "train.csv",
        [
            ("The film, the cast!", "pos"),
            ("A dull film", "neg"),
            ("the end", "pos"),
        ],
    )
    write_csv(tmp_path / "test.csv", [("The unseen film", "neg")])
    out = load_classification(tmp_path, max_len=4, vocab_size=6)
    # training words: the x3, film x2, then , ! a cast dull end x1 (ties by text)
    assert out.vocab == ("<pad>", "<unk>", "the", "film", "!", ",")
    assert out.vocab_size == 6 and out.pad_id == 0 and out.unk_id == 1
    assert out.train_x.tolist() == [
        [2, 3, 5, 2],  # the film , the (cast ! cut off)
        [1, 1, 3, 0],  # a dull film
        [2, 1, 0, 0],  # the end
    ]
    assert out.test_x.tolist() == [[2, 1, 3, 0]]
    assert out.labels == ("neg", "pos") and out.n_classes == 2
    assert out.train_y.tolist() == [1, 0, 1] and out.test_y.tolist() == [0]
    assert out.truncated == 1 and out.name == tmp_path.name
    assert out.train_x.dtype == out.train_y.dtype == np.int64


def test_jsonl_labels_order_as_numbers(tmp_path):
    rows = [{"text": f"w{i} common", "label": label} for i, label in enumerate([10, 2, 2, 10, 7])]
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = load_classification(path, test_fraction=0.4, seed=3)
    assert out.labels == (2, 7, 10)
    # CSV holds them as strings: ordered as numbers all the same
    write_csv(tmp_path / "set.csv", [(r["text"], str(r["label"])) for r in rows])
    again = load_classification(tmp_path / "set.csv", test_fraction=0.4, seed=3)
    assert again.labels == (2, 7, 10)
    np.testing.assert_array_equal(again.train_x, out.train_x)
    np.testing.assert_array_equal(again.test_y, out.test_y)


def test_a_file_without_a_test_split_is_split_by_the_seed(tmp_path):
    rows = [(f"row{i} text", "a" if i % 3 else "b") for i in range(20)]
    write_csv(tmp_path / "all.csv", rows)
    for seed in (0, 1):
        out = load_classification(tmp_path / "all.csv", test_fraction=0.25, seed=seed)
        chosen = np.random.default_rng(seed).permutation(20)[:5]
        rest = [i for i in range(20) if i not in set(chosen.tolist())]
        # the first word of each row names it (rowN); the test rows' are
        # out of the vocabulary, which is made from the training rows
        word = {w: i for i, w in enumerate(out.vocab)}
        assert out.train_x[:, 0].tolist() == [word[f"row{i}"] for i in rest]
        assert (out.test_x[:, 0] == out.unk_id).all() and len(out.test_x) == 5
        # labels "a" and "b" are classes 0 and 1; the test rows keep the file's order
        assert out.test_y.tolist() == [int(i % 3 == 0) for i in sorted(chosen.tolist())]
    first = load_classification(tmp_path / "all.csv", seed=0)
    second = load_classification(tmp_path / "all.csv", seed=0)
    np.testing.assert_array_equal(first.test_x, second.test_x)


def test_classification_errors_name_their_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="^source: no such file or folder"):
        load_classification(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="^source: 'sst5' is not a classification set"):
        load_classification("sst5")
    write_csv(tmp_path / "nolabel.csv", [("some text", "x")], header=("text", "category"))
    with pytest.raises(ValueError, match="^label_column: .*nolabel.csv has no column 'label'"):
        load_classification(tmp_path / "nolabel.csv")
    write_csv(
        tmp_path / "two.csv", [("one text", "x"), ("two text", "y")], header=("body", "label")
    )
    with pytest.raises(ValueError, match="^text_column: .*two.csv has no column 'text'"):
        load_classification(tmp_path / "two.csv")
    assert (
        load_classification(tmp_path / "two.csv", text_column="body", test_fraction=0.5).n_classes
        == 2
    )
    (tmp_path / "set.txt").write_text("text\n", encoding="utf-8")
    with pytest.raises(ValueError, match="^source: .*set.txt is neither a .csv nor a .jsonl"):
        load_classification(tmp_path / "set.txt")
    write_csv(tmp_path / "gap.csv", [("text one", "x"), ("text two", "")])
    with pytest.raises(ValueError, match="^label_column: row 1 of .*gap.csv has no label"):
        load_classification(tmp_path / "gap.csv")
    with pytest.raises(ValueError, match="^vocab_size must be >= 3"):
        load_classification(tmp_path / "two.csv", text_column="body", vocab_size=2)
    with pytest.raises(ValueError, match="^max_len must be >= 1"):
        load_classification(tmp_path / "two.csv", text_column="body", max_len=0)
    with pytest.raises(ValueError, match=r"^test_fraction must be in \(0, 1\)"):
        load_classification(tmp_path / "two.csv", text_column="body", test_fraction=1)


def fake_datasets(tables):
    """A stand-in for the datasets library: load_dataset(name) gives the
    dict of splits `tables[name]` (each a dict of columns), and records the
    names asked for."""
    asked = []

    class Table(dict):
        @property
        def column_names(self):
            return list(self)

    def load_dataset(name, config=None):
        asked.append((name, config))
        return {split: Table(columns) for split, columns in tables[name].items()}

    return types.SimpleNamespace(load_dataset=load_dataset, load_from_disk=None), asked


def test_each_name_reads_its_hub_copy_and_columns(monkeypatch):
    tables = {}
    for name, spec in CLASSIFICATION_DATASETS.items():
        tables[spec.hub_id] = {
            spec.train: {spec.text: [f"{name} train a", f"{name} train b"], spec.label: [0, 1]},
            spec.test: {spec.text: [f"{name} test"], spec.label: [1]},
            "other": {spec.text: ["never read"], spec.label: [5]},
        }
        # a column of the same name with other values, never read
        for split in tables[spec.hub_id].values():
            split.setdefault("label", [9] * len(split[spec.text]))
    module, asked = fake_datasets(tables)
    monkeypatch.setitem(sys.modules, "datasets", module)
    for name, spec in CLASSIFICATION_DATASETS.items():
        out = load_classification(name.upper() if name == "mr" else name)
        assert asked[-1] == (spec.hub_id, spec.config)
        assert out.name == name and out.labels == (0, 1)
        assert out.train_y.tolist() == [0, 1] and out.test_y.tolist() == [1]
        assert set(out.vocab[2:4]) == {name, "train"}  # twice each in the training rows


def test_the_docstring_table_lists_the_registry():
    doc = data.__doc__
    for name, spec in CLASSIFICATION_DATASETS.items():
        line = next(row for row in doc.splitlines() if row.startswith(f"``{name}``"))
        assert line.split() == [
            f"``{name}``",
            f"``{spec.hub_id}``",
            f"``{spec.text}``",
            f"``{spec.label}``",
            f"{spec.train},",
            spec.test,
        ]


def test_published_figures_are_of_the_named_sets():
    # the table is empty unless read from the paper; whatever it holds is
    # a dataset of the registry, an embedding of the paper, a percentage
    assert "2010.04903" in data.PUBLISHED_SOURCE
    for name, row in PUBLISHED.items():
        assert name in CLASSIFICATION_DATASETS
        assert set(row) <= {"random", "bert", "roberta", "gpt2", "sinusoid"}
        assert all(0.0 < accuracy <= 100.0 for accuracy in row.values())


# ---------------------------------------------------- datasets, for real


@pytest.fixture
def datasets(tmp_path, monkeypatch):
    module = require("datasets")
    monkeypatch.setattr(module.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return module


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_a_text_through_datasets_from_local_files(datasets, tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"text": "first line\n"}, {"text": "second"}])
    write_jsonl(folder / "validation.jsonl", [{"text": "held out"}, {"text": "text"}])
    out = load_text(f"datasets:{folder}", split=("train", "validation"))
    assert bytes(out.train.astype(np.uint8)) == b"first line\nsecond"
    assert bytes(out.valid.astype(np.uint8)) == b"held out\ntext"
    assert out.source == f"datasets:{folder}"
    # a named split, cut by a fraction
    out = load_text(f"datasets:{folder}:default:validation", split=0.5)
    assert bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)) == b"held out\ntext"
    out = load_text(f"datasets:{folder}::validation", split=0.5)
    assert bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)) == b"held out\ntext"
    with pytest.raises(ValueError, match="^split: .* has no split 'test'"):
        load_text(f"datasets:{folder}", split=("train", "test"))
    with pytest.raises(ValueError, match="^column: .* has no column 'body'"):
        load_text(f"datasets:{folder}", column="body")


def test_a_saved_dataset_through_datasets(datasets, tmp_path):
    files, saved = tmp_path / "files", tmp_path / "saved"
    files.mkdir()
    write_jsonl(files / "train.jsonl", [{"text": t} for t in ("alpha", "beta", "gamma")])
    # (read from files: Dataset.from_dict fails to hash its table under some
    # pyarrow versions, which is none of this test's business)
    datasets.load_dataset(str(files)).save_to_disk(str(saved))
    out = load_text(f"datasets:{saved}", split=0.5)
    assert bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)) == b"alpha\nbeta\ngamma"
    out = load_text(f"datasets:{saved}::train", split=0.5)
    assert bytes(np.concatenate([out.train, out.valid]).astype(np.uint8)) == b"alpha\nbeta\ngamma"
    with pytest.raises(ValueError, match="^source: .* is a saved dataset, which has no config"):
        load_text(f"datasets:{saved}:default")
    with pytest.raises(ValueError, match="^source: .* has no split 'test'"):
        load_text(f"datasets:{saved}::test")


def test_classification_through_datasets_matches_the_local_folder(datasets, tmp_path):
    folder = tmp_path / "cls"
    folder.mkdir()
    train = [{"text": f"word{i % 4} film", "label": i % 2} for i in range(12)]
    test = [{"text": "word1 film word9", "label": 1}, {"text": "film", "label": 0}]
    write_jsonl(folder / "train.jsonl", train)
    write_jsonl(folder / "test.jsonl", test)
    local = load_classification(folder, max_len=5)
    through = load_classification(f"datasets:{folder}", max_len=5)
    for field in ("train_x", "train_y", "test_x", "test_y"):
        np.testing.assert_array_equal(getattr(through, field), getattr(local, field))
    assert through.vocab == local.vocab and through.labels == (0, 1)
    with pytest.raises(ValueError, match="^label_column: .* has no column 'stars'"):
        load_classification(f"datasets:{folder}", label_column="stars")


def test_the_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    found = finder.find(data, "posenc.lab.data", globs=vars(data).copy())
    assert sum(len(t.examples) for t in found) >= 8
    report = []
    for test in found:
        runner.run(test, out=report.append)
    assert not runner.summarize(verbose=False).failed, "".join(report)
