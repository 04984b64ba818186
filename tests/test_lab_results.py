"""The lab guide's published results: the files benchmarks/lab_results.py
kept in docs/reports/lab_results/ and docs/make_lab_results.py, which puts
them where the guide reads them.  Each kept table is checked against the
kept JSON's figures (recomputed here with NumPy), so that the page cannot
show other numbers than the run wrote.  Neither torch nor training is
needed."""

import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
KEPT = os.path.join(DOCS, "reports", "lab_results")


def _module(folder, name):
    path = os.path.join(ROOT, folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    return __import__(name)


NAMES = ("alibi_lm", "selective_copy")


def test_the_docs_script_puts_the_kept_files_where_the_guide_reads_them(tmp_path):
    script = _module("docs", "make_lab_results")
    assert script.NAMES == NAMES
    assert script.main(["--out", str(tmp_path)]) == 0
    for name in NAMES:
        for ext in ("md", "png"):
            made = (tmp_path / "lab_results" / f"{name}.{ext}").read_bytes()
            with open(os.path.join(KEPT, f"{name}.{ext}"), "rb") as f:
                assert made == f.read()


def test_without_kept_files_each_page_says_how_to_make_them(tmp_path, monkeypatch):
    script = _module("docs", "make_lab_results")
    snapshot = _module("docs", "report_snapshot")
    monkeypatch.setattr(snapshot, "KEPT", str(tmp_path / "nothing"))
    assert script.main(["--out", str(tmp_path)]) == 0
    for name in NAMES:
        text = (tmp_path / "lab_results" / f"{name}.md").read_text()
        assert "benchmarks/lab_results.py --out DIR --snapshot" in text


@pytest.mark.parametrize("name", NAMES)
def test_each_kept_table_shows_its_json(name):
    with open(os.path.join(KEPT, f"{name}.json"), encoding="utf-8") as f:
        record = json.load(f)
    with open(os.path.join(KEPT, f"{name}.md"), encoding="utf-8") as f:
        page = f.read()
    assert not record["benchmark"]["quick"]
    lines = page.splitlines()
    head = lines.index("| encoding | " + " | ".join(map(str, record["lengths"])) + " |")
    body = lines[head + 2 : head + 2 + len(record["labels"])]  # the first table's rows
    rows = {line.strip("| ").split(" | ")[0]: line.strip("| ").split(" | ")[1:] for line in body}
    assert list(rows) == record["labels"]
    for label in record["labels"]:
        values = np.array(record["values"][label])
        assert values.shape == (len(record["seeds"]), len(record["lengths"]))
        means, stds = values.mean(axis=0), values.std(axis=0, ddof=1)
        for cell, mean, std in zip(rows[label], means, stds):
            shown_mean, shown_std = (float(x) for x in cell.split(" ± "))
            decimals = len(cell.split(" ± ")[0].partition(".")[2])
            assert shown_mean == pytest.approx(mean, abs=0.51 * 10.0**-decimals)
            assert shown_std == pytest.approx(std, abs=0.51 * 10.0**-decimals)
    # the settings the page states are the run's
    settings = record["settings"]
    assert f"{settings['train']['steps']} steps of {settings['train']['batch_size']}" in page
    assert f"trained at {settings['train_length']}, evaluated at" in page
    assert f"{record['benchmark']['wall_seconds'] / 60:.1f} min" in page


def test_the_benchmark_reads_a_kept_json_back_exactly():
    lab_results = _module("benchmarks", "lab_results")
    with open(os.path.join(KEPT, "alibi_lm.json"), encoding="utf-8") as f:
        record = json.load(f)
    result = lab_results.from_record(record)
    assert result.to_dict() == {k: v for k, v in record.items() if k != "benchmark"}
    assert result.skip is not None and set(result.skip["alibi"]) == {1, 2, 4}
