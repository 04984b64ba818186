"""``python -m posenc probe`` and ``python -m posenc info``.

The figures printed are checked against ``posenc.probe.report`` (itself
checked against scikit-learn and the published table in test_probe.py); here
the subject is the command: exit status, what it prints, the files it
writes, and one-line errors without a traceback.
"""

import json
import os
import time

import child_process
import numpy as np
import pytest
import tiny_models

import posenc
from posenc.__main__ import main

PREFIX = "posenc probe: error: "


def run_module(*args):
    """`python -m posenc ...` in a child process, importing this posenc."""
    return child_process.run("-m", "posenc", *args)


@pytest.fixture(scope="module")
def small_npy(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "pe.npy"
    rng = np.random.default_rng(7)
    np.save(path, np.cumsum(rng.standard_normal((64, 16)), axis=0).astype(np.float32))
    return path


def test_probe_default_prints_the_sinusoid_row_beside_the_published_rows(capsys):
    # the baselines beside the figures: test_probe_baselines.py
    assert main(["probe", "--seeds", "2", "--no-progress", "--no-baselines"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("sinusoid 512x768: built in: posenc.sinusoid(512, 768)")
    assert "| embedding | absolute MAE | order error |" in out
    assert "| sinusoid 512x768 (posenc, seeds 0-1) | 0.00 ± 0.00 |" in out
    for row in ("| BERT (Wang & Chen 2020) | 34.14 | 19.72% |", "| RoBERTa", "| GPT-2", "5.08% |"):
        assert row in out


def test_probe_writes_the_plot_and_parseable_json(small_npy, tmp_path, capsys):
    png, js = tmp_path / "p.png", tmp_path / "p.json"
    args = ["probe", "--source", str(small_npy), "--seeds", "2", "--plot", str(png)]
    assert main([*args, "--json", str(js), "--name", "walk"]) == 0
    out, err = capsys.readouterr()
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000
    data = json.loads(js.read_text())
    assert data["name"] == "walk" and data["source"] == str(small_npy) and data["key"] is None
    assert (data["n_positions"], data["dim"], data["seeds"]) == (64, 16, [0, 1])
    from posenc import probe

    expected = probe.report(np.load(small_npy), name="walk", seeds=2, progress=False)
    assert data["absolute_position"]["mae"] == pytest.approx(expected.mae)
    assert data["relative_order"]["error_rate"] == pytest.approx(expected.error_rate)
    assert f"| walk (posenc, seeds 0-1) | {expected.mae:.2f} ± {expected.mae_std:.2f} |" in out
    assert "seed 2/2" not in err  # no progress bar: stderr is not a terminal


def test_probe_reads_a_key_from_a_npz_file(tmp_path, capsys):
    E = np.cumsum(np.random.default_rng(1).standard_normal((40, 8)), axis=0)
    np.savez(tmp_path / "m.npz", other=np.zeros((3, 3)), table=E)
    args = ["--source", str(tmp_path / "m.npz"), "--key", "table", "--seeds", "1"]
    assert main(["probe", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"m.npz: {tmp_path / 'm.npz'} [table]")


def test_python_dash_m_posenc_probe_runs_as_a_module(small_npy):
    result = run_module("probe", "--source", str(small_npy), "--seeds", "1")
    assert result.returncode == 0, result.stderr
    assert "| pe.npy (posenc, seed 0) |" in result.stdout
    assert "Traceback" not in result.stderr


def test_python_dash_m_posenc_info_still_prints_the_configuration():
    result = run_module("info")
    assert result.returncode == 0
    assert result.stdout.startswith(f"posenc {posenc.__version__}")


def _bad_inputs(tmp_path):
    np.save(tmp_path / "cube.npy", np.zeros((4, 5, 6)))
    nan = np.ones((20, 4))
    nan[3, 2] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.savez(tmp_path / "two.npz", a=np.ones((20, 4)), b=np.ones((20, 4)))
    (tmp_path / "notes.txt").write_text("hello")
    np.save(tmp_path / "bf16.npy", np.zeros((20, 4), "V2"))  # numpy.save of a bfloat16 array
    tall = tmp_path / "tall.npy"
    np.save(tall, np.zeros((posenc.probe.MAX_POSITIONS + 1, 2), np.float32))
    return [
        (
            ["--source", str(tall)],
            f"load_position_embeddings({str(tall)!r}), save a slice with "
            f'numpy.save("part.npy", E[:{posenc.probe.MAX_POSITIONS}])',
        ),
        (["--source", str(tmp_path / "missing.npy")], "no such file or directory"),
        (["--source", str(tmp_path / "cube.npy")], "must be a 2-D (n_positions, dim) array"),
        (["--source", str(tmp_path / "nan.npy")], "must be finite"),
        (["--source", str(tmp_path / "two.npz")], "no position-embedding table found"),
        (["--source", str(tmp_path / "two.npz"), "--key", "c"], "key 'c' not found"),
        (["--source", str(tmp_path / "notes.txt")], "is not a .npy, .npz, .safetensors"),
        (["--source", str(tmp_path / "bf16.npy")], "save E.astype(numpy.float32)"),
        (["--key", "wpe.weight"], "--key needs --source"),
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--plot", str(tmp_path / "no" / "p.png")], "--plot: no such directory"),
        (["--json", str(tmp_path)], "is a directory"),
        (["--plot", str(tmp_path / "p.xyz")], "--plot: matplotlib cannot write .xyz files"),
        (["--plot", str(tmp_path / "p.pgf")], ".pgf needs LaTeX"),
        (["--source", str(tmp_path / "nan.npy"), "--json", str(tmp_path / "nan.npy")], "is the"),
        (["--plot", str(tmp_path / "o.png"), "--json", str(tmp_path / "o.png")], "the same file"),
    ]


def test_bad_inputs_give_a_one_line_error_and_a_nonzero_exit(tmp_path, capsys):
    for args, words in _bad_inputs(tmp_path):
        assert main(["probe", *args]) == 1, args
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(PREFIX) and err.count("\n") == 1, err
        assert words in err, (args, err)


def test_bad_inputs_in_a_child_process_print_no_traceback(tmp_path):
    cases = _bad_inputs(tmp_path)
    for args, words in cases[:4] + cases[-4:]:
        result = run_module("probe", *args)
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr.startswith(PREFIX) and result.stderr.count("\n") == 1
        assert words in result.stderr


# ---------------------------------------------------------------- outputs checked before the run


def test_json_or_plot_naming_the_source_is_refused_and_the_source_kept(small_npy, tmp_path, capsys):
    before = small_npy.read_bytes()
    link = tmp_path / "link.npy"
    link.symlink_to(small_npy)
    spellings = [
        str(small_npy),
        str(small_npy.parent / "." / small_npy.name),
        os.path.relpath(small_npy),
        str(link),
    ]
    for spelling in spellings:
        for option in ("--json", "--plot"):
            assert main(["probe", "--source", str(small_npy), option, spelling]) == 1
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1
            assert err.startswith(f"{PREFIX}{option}: ") and "is the --source file" in err, err
    # the same through the link the other way round
    assert main(["probe", "--source", str(link), "--json", str(small_npy)]) == 1
    assert "is the --source file" in capsys.readouterr().err
    assert small_npy.read_bytes() == before


def test_plot_and_json_naming_one_file_are_refused_for_a_name_as_for_source(
    small_npy, tmp_path, capsys
):
    out = tmp_path / "out.png"
    link = tmp_path / "link.png"
    link.symlink_to(out)  # dangling: it names out.png all the same
    spellings = [str(out), str(tmp_path / "." / "out.png"), os.path.relpath(out), str(link)]
    for source in (["--source", str(small_npy)], [str(small_npy)]):
        for spelling in spellings:
            args = ["probe", *source, "--seeds", "1", "--no-progress"]
            assert main([*args, "--plot", str(out), "--json", spelling]) == 1
            stdout, err = capsys.readouterr()
            assert stdout == "" and err.count("\n") == 1
            assert err.startswith(f"{PREFIX}--plot and --json name the same file ({out})"), err
    assert not out.exists()


def test_count_and_time_options_are_bounded_naming_the_flag(small_npy, capsys):
    for args, words in [
        (["--timeout", "0"], "--timeout must be a number of seconds in (0, 3600], got 0.0"),
        (["--timeout", "nan"], "--timeout must be a number of seconds in (0, 3600], got nan"),
        (["--timeout", "inf"], "--timeout must be a number of seconds in (0, 3600], got inf"),
        (["--deadline", "-1"], "--deadline must be a number of seconds in (0, 86400], got -1.0"),
        (["--deadline", "1e9"], "--deadline must be a number of seconds in (0, 86400]"),
        (["--seeds", "1000000000000"], "--seeds must be at most 1000 (the probes run once per"),
        (["--seeds", "1001"], "--seeds must be at most 1000"),
        (["--seeds", "-3"], "--seeds must be >= 1, got -3"),
    ]:
        for source in (["--source", str(small_npy)], [str(small_npy)], []):
            assert main(["probe", *source, "--no-progress", *args]) == 1
            out, err = capsys.readouterr()
            assert out == "" and err.startswith(PREFIX) and err.count("\n") == 1, err
            assert words in err, (args, err)


def test_outputs_may_not_overwrite_a_checkpoint_of_a_source_directory(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    np.save(model / "pe.npy", np.zeros((3, 3)))
    (model / "model.safetensors").write_bytes(b"x")
    for name in ("model.safetensors", "pe.npy"):
        assert main(["probe", "--source", str(model), "--json", str(model / name)]) == 1
        assert "is a file of the --source directory" in capsys.readouterr().err
    assert (model / "model.safetensors").read_bytes() == b"x"


def test_a_plot_format_matplotlib_cannot_write_is_refused_before_the_probes_run(
    small_npy, tmp_path, capsys
):
    start = time.perf_counter()
    args = ["probe", "--source", str(small_npy), "--seeds", "50", "--plot", str(tmp_path / "p.jpq")]
    assert main(args) == 1
    assert time.perf_counter() - start < 5  # 50 seeds would take far longer
    out, err = capsys.readouterr()
    assert out == ""  # no table printed: nothing ran
    assert err.count("\n") == 1 and "--plot: matplotlib cannot write .jpq files" in err
    for fmt in (".png", ".pdf", ".svg"):
        assert fmt in err
    assert not (tmp_path / "p.jpq").exists()


@pytest.mark.parametrize(
    "name,magic", [("p.pdf", b"%PDF"), ("p.SVG", b"<?xml"), ("plot", b"\x89PNG")]
)
def test_plot_writes_the_format_its_extension_names_at_exactly_that_path(
    small_npy, tmp_path, capsys, name, magic
):
    path = tmp_path / name
    assert main(["probe", "--source", str(small_npy), "--seeds", "1", "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(magic)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing appended to the name
    assert f"plot written to {path}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError("Unable to allocate 3.00 GiB for an array"),
        MemoryError(),
        RecursionError("maximum recursion depth exceeded"),
        AttributeError("'list' object has no attribute 'get'"),
    ],
)
def test_errors_no_input_should_raise_still_give_one_line(small_npy, monkeypatch, capsys, exc):
    from posenc.probe import _loading

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(_loading, "load_table", fail)
    assert main(["probe", "--source", str(small_npy)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(PREFIX) and err.count("\n") == 1
    assert type(exc).__name__ in err


def test_help_states_the_row_bound():
    from posenc import probe

    result = run_module("probe", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert f"Tables of up to {probe.MAX_POSITIONS} positions (rows)" in text
    assert f"(at most {probe.MAX_POSITIONS} rows)" in text
    assert "the table of a Hub NAME is E = posenc.probe.load_position_embeddings(NAME)" in text


# ---------------------------------------------------------------- --analyses and --text

WORDS = tiny_models.WORDS  # the words of tiny_models.save_with_tokenizer's tokenizer
TEXT = "the quick brown fox jumps over the lazy dog . " * 3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Tiny models saved with a tokenizer: ``{name: (folder, model)}``."""
    root = tmp_path_factory.mktemp("lm")
    made = {
        "gpt2": tiny_models.gpt2(vocab_size=len(WORDS)),
        "bert": tiny_models.bert("BertForMaskedLM", vocab_size=len(WORDS)),
        "llama": tiny_models.llama(vocab_size=len(WORDS)),
    }
    return {name: (tiny_models.save_with_tokenizer(m, root / name), m) for name, m in made.items()}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def _ids(n=None):
    ids = [WORDS.index(w) for w in TEXT.split()]
    return ids if n is None else ids[:n]


def test_default_analyses_are_the_papers(small_npy, tmp_path, capsys):
    js = tmp_path / "p.json"
    assert main(["probe", "--source", str(small_npy), "--seeds", "1", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "| embedding | absolute MAE | order error |" in out and "Chen et al." not in out
    data = json.loads(js.read_text())
    assert data["analyses"] == ["paper"] and data["locality_symmetry"] is None


def test_analyses_without_the_paper_run_only_what_is_named(small_npy, tmp_path, capsys):
    from posenc import probe

    js = tmp_path / "p.json"
    args = ["--source", str(small_npy), "--analyses", "locality,toeplitz", "--json", str(js)]
    assert main(["probe", *args]) == 0
    out = capsys.readouterr().out
    assert "| embedding |" not in out and "Wang et al." not in out
    E = np.load(small_npy).astype(np.float64)
    loc = probe.attention_locality_symmetry(probe.position_attention(E))
    assert loc.summary() in out
    data = json.loads(js.read_text())
    assert data["analyses"] == ["toeplitz", "locality"] and "absolute_position" not in data
    assert data["locality_symmetry"]["locality"] == loc.locality
    assert data["toeplitz"]["r2"] == probe.toeplitz_fit(E @ E.T).r2


def test_all_on_a_table_runs_every_table_analysis(small_npy, tmp_path, capsys):
    js = tmp_path / "p.json"
    args = ["--source", str(small_npy), "--seeds", "1", "--analyses", "all", "--json", str(js)]
    assert main(["probe", *args]) == 0
    data = json.loads(js.read_text())
    assert data["analyses"] == ["paper", "properties", "toeplitz", "locality"]
    for key in ("absolute_position", "position_properties", "toeplitz", "locality_symmetry"):
        assert data[key] is not None, key
    out = capsys.readouterr().out
    assert "Wang et al. 2021" in out and "Wennberg & Henter" in out and "Chen et al." in out


def test_rope_usage_of_a_saved_llama(saved, tmp_path, capsys):
    from posenc import probe

    folder, model = saved["llama"]
    js = tmp_path / "r.json"
    assert main(["probe", folder, "--analyses", "rope_usage", "--json", str(js)]) == 0
    weights = [layer.self_attn.q_proj.weight.detach().numpy() for layer in model.model.layers]
    expected = probe.rope_frequency_usage(weights, 4, base=500000.0)
    data = json.loads(js.read_text())
    np.testing.assert_array_equal(np.array(data["rope_usage"]["usage"]), expected.usage)
    np.testing.assert_allclose(data["rope_usage"]["frequencies"], expected.frequencies)
    assert "RoPE frequency usage (q_proj weight rows, 2 layers x 4 heads x 4 pairs)" in (
        capsys.readouterr().out
    )


def test_text_analyses_of_a_causal_lm(saved, text_file, tmp_path, capsys):
    from posenc import probe

    folder, model = saved["gpt2"]
    js = tmp_path / "t.json"
    args = ["--analyses", "layer_probe,skip_perplexity", "--text", text_file, "--json", str(js)]
    assert main(["probe", folder, *args]) == 0
    out = capsys.readouterr().out
    data = json.loads(js.read_text())
    ids = _ids()
    layers = probe.layer_position_probe(model, ids, seeds=3)
    np.testing.assert_allclose(data["layer_probe"]["mae"], layers.mae, atol=1e-12)
    skip = probe.skip_position_perplexity(model, _ids(16), ks=(1, 2, 4))  # (64 - 1) // 4 + 1
    assert data["skip_perplexity"]["perplexity"] == {str(k): p for k, p in skip.perplexity.items()}
    assert not data["skip_perplexity"]["pseudo"] and data["skip_perplexity"]["n_tokens"] == 16
    assert f"--text: {len(ids)} tokens" in out and "Skip-position attack (perplexity" in out


def test_text_analyses_of_a_masked_lm_give_the_pseudo_perplexity(saved, text_file, tmp_path):
    from posenc import probe

    folder, model = saved["bert"]
    js = tmp_path / "t.json"
    args = ["--analyses", "skip_perplexity", "--text", text_file, "--json", str(js)]
    assert main(["probe", folder, *args]) == 0
    data = json.loads(js.read_text())["skip_perplexity"]
    skip = probe.skip_position_perplexity(model, _ids(12), ks=(1, 2, 4), mask_token_id=1)
    assert data["pseudo"] and data["perplexity"] == {str(k): p for k, p in skip.perplexity.items()}


def test_rope_activations_of_a_llama(saved, text_file, tmp_path, capsys):
    from posenc import probe

    folder, model = saved["llama"]
    js = tmp_path / "t.json"
    args = ["--analyses", "rope_activations", "--text", text_file, "--json", str(js)]
    assert main(["probe", folder, *args]) == 0
    data = json.loads(js.read_text())["rope_activations"]
    expected = probe.rope_activation_usage(model, _ids())
    np.testing.assert_allclose(data["queries"]["usage"], expected.queries.usage, rtol=1e-12)
    np.testing.assert_allclose(data["keys"]["usage"], expected.keys.usage, rtol=1e-12)
    assert "RoPE frequency usage (keys, 2 layers x 2 heads x 4 pairs)" in capsys.readouterr().out


def test_analyses_that_cannot_run_are_refused_before_anything_runs(
    small_npy, saved, text_file, tmp_path, capsys
):
    folder = saved["gpt2"][0]
    cases = [
        (["--analyses", "nope"], "--analyses: unknown analysis 'nope'"),
        (["--analyses", ","], "--analyses: name at least one analysis"),
        (["--analyses", "rope_usage"], "--analyses rope_usage needs a model NAME"),
        (["--source", str(small_npy), "--analyses", "layer_probe"], "needs a model NAME"),
        ([folder, "--analyses", "layer_probe"], "--analyses layer_probe needs --text FILE"),
        ([folder, "--text", text_file], "--text is read by the analyses layer_probe"),
        ([folder, "--analyses", "locality", "--plot", "x.png"], "add paper to --analyses"),
        ([folder, "--analyses", "locality", "--plot", "d/"], "--plot DIR/ draws the paper's"),
        ([folder, "--analyses", "layer_probe", "--text", "no.txt"], "--text: no such file"),
        (["--analyses", "all", "--text", text_file], "--text is read by a model"),
    ]
    for args, words in cases:
        assert main(["probe", *args]) == 1, args
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(PREFIX) and err.count("\n") == 1, (args, err)
        assert words in err, (args, err)


def test_all_on_a_model_runs_what_applies_and_says_what_it_skipped(saved, text_file, tmp_path):
    js = tmp_path / "all.json"
    args = ["--analyses", "all", "--text", text_file, "--seeds", "1", "--no-progress"]
    assert main(["probe", saved["gpt2"][0], *args, "--json", str(js)]) == 0
    data = json.loads(js.read_text())  # learned positions: a table, no rotation
    assert data["absolute_position"] is not None and data["locality_symmetry"] is not None
    assert "layer_probe" in data and "skip_perplexity" in data
    assert sorted(data["skipped"]) == [
        "alibi",
        "relative_share",
        "rope_activations",
        "rope_logits",
        "rope_usage",
        "t5_biases",
    ]
    assert "no q_proj weights" in data["skipped"]["rope_usage"]
    assert main(["probe", saved["llama"][0], *args, "--json", str(js)]) == 0
    data = json.loads(js.read_text())  # a rotation, no table
    assert sorted(data["skipped"]) == ["alibi", "relative_share", "t5_biases", "table analyses"]
    assert "rope_logits" in data
    assert "rope_usage" in data and "rope_activations" in data and "layer_probe" in data
    assert "absolute_position" not in data


def test_plot_of_a_model_without_a_table_is_one_line(saved, tmp_path, capsys):
    png = tmp_path / "p.png"
    args = [saved["llama"][0], "--analyses", "all", "--seeds", "1", "--plot", str(png)]
    assert main(["probe", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(PREFIX) and err.count("\n") == 1 and "has no position table" in err
    assert not png.exists()
