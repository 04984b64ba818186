"""posenc probe of five tiny models in one command line (a GPT-2, a BERT, a
RoBERTa, a Llama and a T5, served by the loopback Hub): a table per analysis
with a row per model and each figure's noise, a plot per analysis, and a JSON
that records what reruns it; each checked against figures computed here
from the models themselves.  And the guide's report, made by
docs/make_probe_report.py."""

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hub_server import HubServer, Repo
from optional import require

for _name in ("torch", "transformers", "tokenizers", "sklearn", "matplotlib", "huggingface_hub"):
    require(_name)

from posenc import probe  # noqa: E402
from posenc.__main__ import main  # noqa: E402
from posenc.probe.baselines import null_table  # noqa: E402

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _script():
    if DOCS not in sys.path:
        sys.path.insert(0, DOCS)
    import make_probe_report

    return make_probe_report


def _folder_files(folder):
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder).replace(os.sep, "/")] = f.read()
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The guide's five models and text, saved: ``(script, folder, models)``."""
    script = _script()
    root = tmp_path_factory.mktemp("five")
    script.save(str(root))
    return script, root, script.models()


@pytest.fixture(scope="module")
def run(saved, tmp_path_factory):
    """The one command line, the five served as ``tiny/<name>`` by the
    loopback Hub: ``(out, data, plots folder, repos, names)``."""
    script, root, _ = saved
    repos = {f"tiny/{n}": Repo(_folder_files(root / n)) for n in script.NAMES}
    out_dir = tmp_path_factory.mktemp("out")
    server = HubServer(repos).start()
    env = {
        "HF_ENDPOINT": server.url,
        "HF_HUB_CACHE": str(out_dir / "cache"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    saved_env = {k: os.environ.get(k) for k in (*env, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(env)
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.pop("TRANSFORMERS_OFFLINE", None)
    from huggingface_hub import constants  # read HF_HUB_OFFLINE at its import

    offline, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, False
    names = list(repos)
    plots, js = out_dir / "plots", out_dir / "report.json"
    options = list(script.OPTIONS)
    options[options.index("text.txt")] = str(root / "text.txt")
    argv = ["probe", *names, *options, "--plot", f"{plots}/", "--json", str(js)]
    import contextlib
    import io

    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            code = main(argv)
    finally:
        server.stop()
        constants.HF_HUB_OFFLINE = offline
        for k, value in saved_env.items():
            if value is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = value
    assert code == 0, buffer.getvalue()
    return buffer.getvalue(), json.loads(js.read_text()), plots, repos, names


def _table(out, title):
    """The rows of the Markdown table under the line starting with `title`."""
    at = out.index(title)
    block = out[at:].split("\n\n")[1].splitlines()
    assert block[0].startswith("| model |"), block
    return block[2:]


def _ids(script):
    return [script.WORDS.index(w) for w in script.TEXT.split()]


def test_every_analysis_gives_a_table_with_a_row_per_model_it_applies_to(run):
    out, data, _, _, names = run
    gpt2, bert, roberta, llama, t5 = names
    expected = {
        "Wang & Chen (2020), Tables 1 and 2, beside posenc:": [gpt2, bert, roberta],
        "Wang et al. 2021 properties, side by side": [gpt2, bert, roberta],
        "Wennberg & Henter 2021, side by side": [gpt2, bert, roberta],
        "Chen et al. 2023, side by side": [gpt2, bert, roberta],
        "RoPE frequency usage from q_proj weights": [llama],
        "T5 bucket biases (mean over attentions and heads), side by side": [t5],
        "Position through the layers (absolute MAE), side by side": [gpt2, bert, roberta, llama],
        "Skip-position attack (position ids s + i*k), side by side": [gpt2, bert, roberta, llama],
        "RoPE frequency usage from activations": [llama],
        "RoPE: the positional part of the logits (share), side by side": [llama],
    }
    for title, models in expected.items():
        rows = _table(out, title)
        assert [r.split(" | ")[0][2:] for r in rows] == models, (title, rows)
    # what does not apply is said, a line each
    skipped = {d["name"]: d["skipped"] for d in data["models"]}
    assert "table analyses" in skipped[llama] and "table analyses" in skipped[t5]
    assert (
        "layer_probe" in skipped[t5]
        and "does not load as a masked language model" in (skipped[t5]["layer_probe"])
    )


def test_the_noise_columns_are_the_recorded_seeds_figures(run, saved):
    import torch

    out, data, _, _, names = run
    script, _, models = saved
    by_name = {d["name"]: d for d in data["models"]}
    assert data["run"]["model_baseline_seeds"] == [0, 1, 2]
    assert data["run"]["table_baseline_seeds"] == [0, 1, 2]
    # the paper's probes: the noise of GPT-2's table, from the table itself
    gpt2 = models["gpt2-tiny"]
    E = gpt2.transformer.wpe.weight.detach().double().numpy()
    base = by_name[names[0]]["baselines"]
    for seed in (0, 2):
        noise = null_table(E, "random", seed)
        mae = probe.absolute_position_regression(noise, seed=seed).mae
        assert base["random"]["mae"]["per_seed"][seed] == mae
    row = _table(out, "Wang & Chen (2020), Tables 1 and 2")[0]
    assert f"({base['random']['mae']['mean']:.2f} / {base['shuffled']['mae']['mean']:.2f})" in row
    # the layer probe's noise: GPT-2 run with its ids shuffled, the probe of that seed
    ids = _ids(script)
    layer = by_name[names[0]]["layer_probe"]
    for seed in (0, 1, 2):
        order = np.random.default_rng([seed, 1]).permutation(len(ids))
        with torch.no_grad():
            states = gpt2(
                input_ids=torch.tensor([ids]),
                position_ids=torch.tensor(order)[None],
                output_hidden_states=True,
            ).hidden_states
        maes = [probe.absolute_position_regression(h[0].double().numpy(), seed=seed).mae
                for h in states]  # fmt: skip
        np.testing.assert_allclose(layer["baselines"]["shuffled"]["per_seed"][seed], maes,
                                   atol=1e-9)  # fmt: skip
    rows = _table(out, "Position through the layers (absolute MAE), side by side")
    mean = layer["baselines"]
    cell = (
        f"{layer['mae'][0]:.2f} ({mean['random']['mean'][0]:.2f} / "
        f"{mean['shuffled']['mean'][0]:.2f})"
    )
    assert f"| {cell} |" in rows[0], rows[0]
    assert "(-" not in rows[0] and " / -)" not in rows[0]
    llama_row = rows[3]  # no table: no random table, its ids shuffled
    assert "(- / " in llama_row, llama_row
    # T5: the buckets shuffled, from the model's own tables
    t5 = probe.t5_bucket_biases(models["t5-tiny"])
    got = by_name[names[4]]["t5_biases"]["baselines"]["shuffled"]["local_mass"]["per_seed"]
    assert got == pytest.approx([t5.buckets_shuffled(s)["local_mass"] for s in (0, 1, 2)])
    # RoPE from the weights: the pairs shuffled, by hand
    usage = np.array(by_name[names[3]]["rope_usage"]["usage"])
    for seed in (0, 1, 2):
        shuffled = np.random.default_rng([seed, 1]).permuted(usage, axis=-1) ** 2
        share = (shuffled / shuffled.sum(axis=-1, keepdims=True)).mean(axis=(0, 1))
        expected = share[len(share) // 2 :].sum()
        per_seed = by_name[names[3]]["rope_usage"]["baselines"]["shuffled"]["slow_half"]
        assert per_seed["per_seed"][seed] == pytest.approx(expected)


def test_a_plot_per_analysis_none_blank(run):
    import matplotlib.image

    out, _, plots, _, _ = run
    expected = [
        "paper",
        "properties",
        "toeplitz",
        "locality",
        "rope_usage",
        "t5_biases",
        "layer_probe",
        "skip_perplexity",
        "rope_activations",
        "rope_logits",
    ]
    assert sorted(os.listdir(plots)) == sorted(f"{a}.png" for a in expected)
    for a in expected:
        path = plots / f"{a}.png"
        assert path.read_bytes().startswith(b"\x89PNG")
        rgb = np.round(matplotlib.image.imread(path)[..., :3] * 255).astype(np.int64)
        colours = np.unique(rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2])
        assert len(colours) > 20, a  # lines and text, not one blank colour
    assert f"plots written to {plots}/: paper.png" in out


def test_the_json_records_what_reruns_the_report(run, saved):
    import posenc

    _, data, _, repos, names = run
    script, root, _ = saved
    r = data["run"]
    assert r["posenc_version"] == posenc.__version__
    assert r["names"] == names and r["seeds"] == 3
    assert (r["split"], r["regressor"], r["folds"], r["pairs"]) == ("paper", "linear", 5, None)
    assert r["analyses"][:4] == ["paper", "properties", "toeplitz", "locality"]
    text = (root / "text.txt").read_bytes()
    assert r["text"]["sha256"] == hashlib.sha256(text).hexdigest()
    for d, name in zip(data["models"], names):
        assert d["model_commit"] == repos[name].commit
        if "commit" in d:  # the table's fetch
            assert d["commit"] == repos[name].commit
        if "protocol" in d:
            assert d["protocol"]["posenc_version"] == posenc.__version__


def test_the_guides_report_is_made_by_its_script(tmp_path):
    script = _script()
    assert script.main(["--out", str(tmp_path)]) == 0
    page = (tmp_path / "probe_report.md").read_text()
    assert page.startswith("```text\n$ posenc probe gpt2-tiny bert-tiny roberta-tiny")
    for title in ("Position through the layers", "Skip-position attack", "T5 bucket biases"):
        assert title in page
    assert len(os.listdir(tmp_path / "probe_report")) == 10
    data = json.loads((tmp_path / "probe_report.json").read_text())
    assert [d["name"] for d in data["models"]] == list(script.NAMES)
    # the figures the guide quotes, as this run measures them
    guide = (Path(DOCS) / "guide" / "probe.md").read_text(encoding="utf-8")
    by_name = {d["name"]: d for d in data["models"]}
    gpt2, llama = by_name["gpt2-tiny"], by_name["llama-tiny"]["layer_probe"]
    stated = re.search(
        r"GPT-2's absolute MAE ([\d.]+) against ([\d.]+) for a random\s+table and ([\d.]+)",
        guide,
    )
    b = gpt2["baselines"]
    assert [float(x) for x in stated.groups()] == [
        round(gpt2["absolute_position"]["mae"], 2),
        round(b["random"]["mae"]["mean"], 2),
        round(b["shuffled"]["mae"]["mean"], 2),
    ]
    (layer0,) = re.search(r"shuffled-ids noise to the last digit \(([\d.]+)", guide).groups()
    assert llama["mae"][0] == llama["baselines"]["shuffled"]["mean"][0]
    assert float(layer0) == round(llama["mae"][0], 2)
    (order,) = re.search(r"\(([\d.]+)% for the GPT-2's\)", guide).groups()
    assert float(order) == round(100 * gpt2["relative_order"]["error_rate"], 2)
    for d in data["models"][:3]:
        per_seed = d["relative_order"]["error_rate_per_seed"]
        for kind in ("random", "shuffled"):
            assert d["baselines"][kind]["order_error"]["per_seed"] == per_seed
    (norm,) = re.search(r"Their rows have norms near\s+([\d.]+)", guide).groups()
    E = script.models()["gpt2-tiny"].transformer.wpe.weight.detach().double().numpy()
    assert float(norm) == round(float(np.linalg.norm(E, axis=1).mean()), 2)
