"""Command line of posenc (the installed ``posenc`` command, or ``python -m posenc``).

posenc info                       version, SIMD path, threads, NumPy
posenc probe                      probe the 512 x 768 sinusoid
posenc probe --source FILE        probe a table in a .npy, .npz, .safetensors
                                  or torch file, or a model directory
posenc probe NAME [NAME ...]      probe models on the Hugging Face Hub (gpt2,
                                  org/name@revision) or local paths
posenc context MODEL --lengths L  a RoPE model's perplexity by context length,
                                  passkey retrieval, under each scaling method
posenc lab --task T --encodings E  the same small Transformer trained with each
                                  position encoding, evaluated at each length
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Optional, Sequence, Tuple

from .probe import EXTRAS, MAX_POSITIONS
from .probe._common import MAX_DEADLINE, MAX_TIMEOUT
from .probe.compare import ANALYSES as _MODEL_ANALYSES

_PROG = "posenc"
#: The most seeds --seeds runs (the probes run once per seed).
MAX_SEEDS = 1000

_PROBE_HELP = """\
Run Wang & Chen's probes ("What Do Position Embeddings Learn?", EMNLP 2020)
on a position-embedding table and print the figures beside the published
ones: absolute position by linear regression (MAE, in positions) and
relative order by logistic regression (error rate), mean and standard
deviation over seeds, with the table's informativeness.  Without --source,
the built-in 512 x 768 sinusoid of Vaswani et al. is probed.

Tables of up to {max_positions} positions (rows) are probed: the report holds
their n x n cosine map ({cosine_mib} MiB at {max_positions}).  For a taller table, save
a slice (numpy.save("part.npy", E[:{max_positions}]) or every k-th row E[::k])
and probe that file; the table of a Hub NAME is E =
posenc.probe.load_position_embeddings(NAME) in Python (the table alone is
fetched).  --source must be a regular file or a model directory
(sharded checkpoints are read through their .index.json, one shard); FIFOs,
devices and sockets are refused without being opened.

NAME is a local path or a model on the Hugging Face Hub (gpt2,
bert-base-uncased, org/name@revision; needs huggingface_hub: pip install
"posenc[hub]"): only the safetensors header and the position table are
fetched, by HTTP range requests, and cached for offline use; each request
waits at most --timeout seconds for the server (default: HF_HUB_ETAG_TIMEOUT
and HF_HUB_DOWNLOAD_TIMEOUT, else 10), each model's load takes at most
--deadline seconds (default: POSENC_HUB_DEADLINE, else 120), and a table
declared larger than POSENC_HUB_MAX_BYTES (default 256 MiB) is refused before
it is fetched.  The rows probed are the model's positions, by its config.json
(a Hub NAME, a model directory, or a file with one beside it): RoBERTa's
family (XLM-R, CamemBERT, ...) from pad_token_id + 1, OPT's and BART's from
row 2; GPT-2 is cut to the paper's 512 rows (--no-paper-cut keeps all), and
--rows START:STOP chooses them.  Several names give one table of the paper's
figures side by side with posenc's, and one table per analysis.

Every figure is printed beside its noise: the same measure on a random table
with the same row norms and on the table's rows shuffled, over the same seeds;
for the analyses that run a model, the model run with its position table
random (row norms kept) and with its position ids shuffled (rope_activations:
random q/k projections of the same row norms, and the pairs shuffled; T5:
the buckets shuffled), over the first min(--seeds, 3) seeds (--no-baselines
skips them all).  Several names give one table per analysis, a row per
model; --plot DIR/ writes one PNG per analysis, a line or panel per model,
and --json records what reruns the run (posenc's version, every setting,
each model's commit).  --split heldout keeps the test positions out of
training; --regressor chooses the probe family (linear, the paper's; ridge;
mlp; knn); --folds and --pairs the cross-validation.

--analyses chooses what runs (comma-separated; default: paper):
  paper             Wang & Chen's probes (absolute position, relative order,
                    cosine map, informativeness), beside the published rows
  properties        Wang et al. 2021: monotonicity, translation invariance,
                    symmetry of the table's dot product
  toeplitz          Wennberg & Henter 2021: Toeplitz share of E @ E.T
  locality          Chen et al. 2023: locality and symmetry of the attention
                    softmax(E E^T / sqrt(dim)) the positions alone give
  rope_usage        Barbero et al. 2025: the norm of each rotary pair's q_proj
                    rows per layer and head, read layer by layer (a Hub model:
                    only those rows are fetched); a RoPE model NAME
  alibi             ALiBi's slope per head and the distance at which its bias
                    reaches 3 logit spreads (BLOOM, MPT, Falcon): a spread of
                    1 from the config alone, or, with --text, each head's
                    spread measured on the text's paragraphs
  t5_biases         T5's learned bucket biases per layer and head, expanded to
                    distances: locality, direction, decay, head type (T5, MT5,
                    UMT5, LongT5; only the bias tables are fetched)
  layer_probe       the absolute-position probe on each layer's hidden states
  skip_perplexity   the skip-position attack: perplexity with position ids i*k
                    (k = 1, 2, 4; a masked LM's pseudo-perplexity)
  rope_activations  the norm of each rotary pair of the queries and keys,
                    per paragraph of the text, averaged, with the spread
  rope_logits       a RoPE model's logits split into the content part (no
                    rotation) and the part the rotation adds, per head
  relative_share    DeBERTa-v2/v3's c2c, c2p and p2c terms, XLNet's content
                    and position terms: each one's share of the logits
  all               every analysis that applies to the NAME given
The last five run the model (transformers, with its tokenizer) on the text
of --text FILE; a Hub NAME's config, tokenizer and safetensors weights are
fetched whole by posenc (HF_ENDPOINT, the token, the cache, --timeout and
--deadline per file, POSENC_HUB_MAX_BYTES per file) and loaded from that
copy, whose commit --json records.  The
last four read each paragraph (separated by blank lines; at most 64) as a
text of its own, and give the mean over them and the spread."""


def _build_parser():
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Positional encodings of Transformer models, and probes of what a "
        "position embedding has learned.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{info,probe,context,lab}")
    sub.add_parser("info", help="print version, SIMD path, threads and NumPy version")
    probe = sub.add_parser(
        "probe",
        help="probe a position-embedding table (default: the 512 x 768 sinusoid)",
        description=_PROBE_HELP.format(
            max_positions=MAX_POSITIONS, cosine_mib=MAX_POSITIONS**2 * 8 // 2**20
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    probe.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="models to probe: Hub repo ids (gpt2, org/name@revision) or local paths",
    )
    probe.add_argument(
        "--source",
        metavar="FILE",
        help="a .npy/.npz/.safetensors/torch file, a checkpoint index (.index.json) or a "
        f"model directory holding the table (at most {MAX_POSITIONS} rows)",
    )
    probe.add_argument(
        "--key",
        metavar="K",
        help="name of the table in the file (default: the one key ending in wpe.weight, "
        "embeddings.position_embeddings.weight or embed_positions.weight)",
    )
    probe.add_argument("--name", help="what to call the table in the output")
    probe.add_argument(
        "--seeds",
        type=int,
        default=10,
        metavar="N",
        help=f"run the probes with seeds 0..N-1 (1 to {MAX_SEEDS})",
    )
    probe.add_argument(
        "--plot",
        metavar="FILE",
        help="write the figure to this file, in the format its extension names (.png, .pdf, "
        ".svg, ...: those matplotlib writes; PNG without one); checked before the probes run. "
        "A folder (one that exists, or a path ending in /) gets one PNG per analysis, a line "
        "or panel per model",
    )
    probe.add_argument("--json", metavar="FILE", help="write the figures to this JSON file")
    probe.add_argument(
        "--analyses",
        metavar="LIST",
        default="paper",
        help="comma-separated analyses to run (see above; default: paper)",
    )
    probe.add_argument(
        "--text",
        metavar="FILE",
        help="a UTF-8 text file the model is run on, for layer_probe, skip_perplexity and "
        "rope_activations",
    )
    probe.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="a Hub NAME: the seconds each request waits for the server (default: "
        "HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT, else 10)",
    )
    probe.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="a Hub NAME: the seconds each model's load may take in all (default: "
        "POSENC_HUB_DEADLINE, else 120)",
    )
    probe.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr while probing"
    )
    probe.add_argument(
        "--rows",
        metavar="START:STOP",
        help="the table rows to probe (default: those the model's config makes positions: "
        "RoBERTa's family from pad_token_id + 1, OPT's and BART's from 2, GPT-2 cut to 512)",
    )
    probe.add_argument(
        "--no-paper-cut",
        action="store_true",
        help="probe all of GPT-2's rows, not the paper's first 512",
    )
    probe.add_argument(
        "--split",
        choices=("paper", "heldout"),
        default="paper",
        help="the probes' folds: the paper's (default), or held-out positions that no "
        "training row or pair has",
    )
    probe.add_argument(
        "--regressor",
        choices=("linear", "ridge", "mlp", "knn"),
        default="linear",
        help="the probes' family (default: linear, the paper's)",
    )
    probe.add_argument(
        "--folds", type=int, default=5, metavar="K", help="cross-validation folds (default 5)"
    )
    probe.add_argument(
        "--pairs",
        type=int,
        metavar="N",
        help="the order probe's pairs (default: as many as positions)",
    )
    probe.add_argument(
        "--no-baselines",
        action="store_true",
        help="do not take each measure on a random and a row-shuffled table beside it",
    )
    _context_parser(sub)
    _lab_parser(sub)
    return parser


# Checkpoint files a model directory is read from: --json and --plot may not
# overwrite one.
_CHECKPOINT_SUFFIXES: Tuple[str, ...] = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".npz",
    ".npy",
)
_CHECKPOINT_SUFFIXES += (".index.json",)


class _Failure(Exception):
    """An error the command line reports in one line, without a traceback."""


def _check_writable(path, what):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise _Failure(f"{what}: no such directory: {folder}")
    if os.path.isdir(path):
        raise _Failure(f"{what}: {path} is a directory")


def _same_file(a, b):
    """Whether paths `a` and `b` name the same file (``os.path.samefile`` when
    both exist, else the same path once links are resolved)."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _check_not_source(path, what, source):
    """`path` (an output) must not overwrite the source or a checkpoint file
    of a source directory."""
    if source is None:
        return
    if _same_file(path, source):
        raise _Failure(f"{what}: {path} is the --source file; write the output elsewhere")
    if (
        os.path.isdir(source)
        and os.path.isfile(path)
        and _same_file(os.path.dirname(os.path.abspath(path)), source)
        and path.lower().endswith(_CHECKPOINT_SUFFIXES)
    ):
        raise _Failure(
            f"{what}: {path} is a file of the --source directory; write the output elsewhere"
        )


def _check_plot_format(path):
    """The --plot extension, checked before the probes run (they take seconds)."""
    from . import probe

    try:
        fmt = probe._plot_format(path, "--plot")
    except ValueError as exc:
        raise _Failure(str(exc)) from exc
    if fmt == "pgf":
        raise _Failure(f"--plot: {path}: .pgf needs LaTeX; write a .pdf or .svg file instead")


def _local_config(path):
    """The ``config.json`` of a model directory, or beside a file (None if none)."""
    from .probe._loading import local_config

    return local_config(path)


def _rows_of(table, config, args):
    """``(rows, published, note)``: the rows probed, by the model's position
    rule (or --rows), the GPT-2 cut unless --no-paper-cut, the note said why."""
    from .probe import hub
    from .probe.offsets import parse_rows

    rows = None
    if getattr(args, "rows", None) is not None:
        try:
            rows = parse_rows(args.rows)
        except ValueError as exc:
            raise _Failure(f"--rows: {exc}") from exc
    try:
        out, published, note = hub.paper_rows(
            table, config, paper_cut=not getattr(args, "no_paper_cut", False), rows=rows
        )
    except ValueError as exc:
        raise _Failure(f"{exc} (--rows START:STOP)") from exc
    if not note:
        n = int(table.shape[0])
        if config is None:
            note = f"all {n} rows probed (no config.json: no offset rule known; --rows to choose)"
        else:
            kind = config.get("model_type") if isinstance(config, dict) else None
            note = f"all {n} rows probed ({kind or 'this model type'}: rows start at position 0)"
    return out, published, note


def _load_named(name, key, args=None):
    """``(table, where, key, published, note, fetched)`` for a NAME: a Hub
    model or a local path, its rows those its config makes positions."""
    from . import probe
    from .probe import hub
    from .probe._loading import load_table

    if not hub.is_hub_name(name):
        loaded, used = load_table(name, key, max_rows=probe.MAX_POSITIONS)
        rows, published, note = _rows_of(probe._to_numpy(loaded), _local_config(name), args)
        return rows, name + (f" [{used}]" if used else ""), used, published, note, None
    got = hub.fetch(name, key=key, max_rows=probe.MAX_POSITIONS, paper=True)
    rows, published, note = _rows_of(got.table, got.config, args)
    where = f"{got.repo_id}@{got.revision} ({got.commit[:12]}) on the Hub [{got.key}]"
    fetched = "from the cache" if got.from_cache else f"{got.bytes_fetched:,} bytes fetched"
    return rows, f"{where}; {fetched}", got.key, published, note, got


def _slice_advice(source, key):
    """How to probe part of the table of `source` (a Hub name or a file),
    which has too many rows: load it in Python, save a slice, probe that."""
    from . import probe
    from .probe import hub

    n = probe.MAX_POSITIONS
    call = f"E = posenc.probe.load_position_embeddings({source!r}"
    call += f", key={key!r})" if key is not None else ")"
    if hub.is_hub_name(source):
        fetched = (
            " (it fetches the table alone, up to POSENC_HUB_MAX_BYTES, or max_bytes=, "
            f"default {hub.DEFAULT_MAX_BYTES // 2**20} MiB)"
        )
    else:
        fetched = ""
    return (
        f"to probe part of it, load it in Python with {call}{fetched}, save a slice with "
        f'numpy.save("part.npy", E[:{n}]) (or every k-th row, E[::k]) and run '
        "posenc probe --source part.npy"
    )


def _paper_table(results):
    """The paper's Tables 1 and 2 beside posenc's figures, one row a model,
    each of posenc's figures followed by its noise (random table / rows
    shuffled, means over the seeds) where measured."""
    from .probe import PUBLISHED

    published = {r.embedding: r for r in PUBLISHED}
    lines = [
        "| model | rows probed | absolute MAE (posenc) | order error (posenc) "
        "| paper's row | absolute MAE (paper) | order error (paper) |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for name, report, paper, note in results:
        row = published.get(paper) if paper else None
        n = report.shape[0]
        shown = note and not note.startswith("all ")  # rows dropped or cut: said why
        rows = f"{n}" + (f" ({note})" if shown else "")
        mae = f"{report.mae:.2f} ± {report.mae_std:.2f}"
        err = f"{100 * report.error_rate:.2f}% ± {100 * report.error_rate_std:.2f}%"
        if report.baselines:
            b = report.baselines
            mae += f" ({b['random']['mae'].mean:.2f} / {b['shuffled']['mae'].mean:.2f})"
            err += (
                f" ({100 * b['random']['order_error'].mean:.2f}% / "
                f"{100 * b['shuffled']['order_error'].mean:.2f}%)"
            )
        lines.append(
            f"| {name} | {rows} | {mae} | {err} | "
            f"{row.embedding if row else '-'} | {f'{row.mae:.2f}' if row else '-'} | "
            f"{f'{100 * row.error_rate:.2f}%' if row else '-'} |"
        )
    if any(report.baselines for _, report, _, _ in results):
        lines += ["", "(in brackets: noise, random table, row norms kept / rows shuffled)"]
    return "\n".join(lines)


_TABLE_ANALYSES = ("paper", "properties", "toeplitz", "locality")
#: What --analyses may name, in the order they run and print: the analyses of
#: a table, then those of a model (the ones ``probe.compare`` sets side by side).
ANALYSES: Tuple[str, ...] = _TABLE_ANALYSES + _MODEL_ANALYSES
#: The analyses of a model's weights or config, run without a text.
_WEIGHT_ANALYSES = ("rope_usage", "alibi", "t5_biases")
#: The analyses of a model run on --text.
_TEXT_ANALYSES = tuple(a for a in _MODEL_ANALYSES if a not in _WEIGHT_ANALYSES)
#: The most paragraphs of --text read as texts of their own.
_MAX_TEXTS = 64
#: The skip factors of skip_perplexity.
_KS = (1, 2, 4)
#: The most tokens of --text a model is run on.
_MAX_TOKENS = 512


def _analyses(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise _Failure("--analyses: name at least one analysis")
    if "all" in names:
        return ANALYSES
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise _Failure(
            f"--analyses: unknown analysis {unknown[0]!r}; choose from {', '.join(ANALYSES)} or all"
        )
    return tuple(n for n in ANALYSES if n in names)


def _check_analyses(args, analyses):
    """What the chosen analyses need, checked before anything runs."""
    model_ones = [a for a in analyses if a in _MODEL_ANALYSES]
    if model_ones and (not args.names or args.source is not None) and args.analyses != "all":
        raise _Failure(
            f"--analyses {model_ones[0]} needs a model NAME (a model directory or a Hub model), "
            "not --source or the built-in sinusoid"
        )
    text_ones = [a for a in analyses if a in _TEXT_ANALYSES]
    if text_ones and args.text is None and args.analyses != "all":
        raise _Failure(f"--analyses {text_ones[0]} needs --text FILE (the text the model reads)")
    if args.text is not None and not text_ones and "alibi" not in analyses:
        raise _Failure(
            "--text is read by the analyses layer_probe, skip_perplexity, rope_activations, "
            "rope_logits, relative_share and alibi; name one in --analyses"
        )
    if args.text is not None and (not args.names or args.source is not None):
        raise _Failure("--text is read by a model: give a model NAME, not --source or no NAME")
    if args.plot is not None and "paper" not in analyses and not _plot_folder(args.plot):
        raise _Failure(
            "--plot FILE draws the paper's probes: add paper to --analyses, or give a folder "
            "(--plot DIR/) for one plot per analysis"
        )
    drawn = ("paper",) + _MODEL_ANALYSES
    if args.plot is not None and not any(a in drawn for a in analyses):
        raise _Failure(
            "--plot DIR/ draws the paper's probes and the analyses of a model; the table "
            "analyses alone are drawn with the paper's: add paper to --analyses"
        )


def _applicable(args, analyses):
    """``all`` runs what applies: the table analyses, and the model ones for a
    NAME (those reading a text only with --text)."""
    if args.analyses != "all":
        return analyses
    out = tuple(a for a in analyses if a in _TABLE_ANALYSES)
    if args.names and args.source is None:
        out += _WEIGHT_ANALYSES
        if args.text is not None:
            out += _TEXT_ANALYSES
    return out


def _read_text(path):
    if not os.path.isfile(path):
        raise _Failure(f"--text: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except UnicodeDecodeError as exc:
        raise _Failure(f"--text: {path} is not UTF-8 text ({exc.reason})") from exc
    if not text.strip():
        raise _Failure(f"--text: {path} holds no text")
    return text


def _language_model(name, entry=None):
    """``(model, tokenizer, mask_token_id)`` of a NAME, by transformers: a
    masked LM where the checkpoint is one (or a bare encoder whose tokenizer
    has a mask token), else a causal LM.  A Hub NAME is fetched by posenc's
    own requests (``probe.hub.snapshot``: HF_ENDPOINT, the token, the cache
    and the limits as for a table) and loaded from that copy; its commit is
    recorded in `entry` (a dict) as ``"model_commit"``."""
    from .probe import hub
    from .probe._optional import require as _require

    transformers = _require("transformers", "--analyses with --text")
    _require("torch", "--analyses with --text")
    folder, commit = hub.snapshot(name) if hub.is_hub_name(name) else (name, None)
    if entry is not None:
        entry["model_commit"] = commit
    _check_tokenizer_files(name, folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    config = transformers.AutoConfig.from_pretrained(folder)
    archs = tuple(getattr(config, "architectures", None) or ())
    masked = any(a.endswith("ForMaskedLM") for a in archs) or (
        not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
        and getattr(tokenizer, "mask_token_id", None) is not None
    )
    auto = transformers.AutoModelForMaskedLM if masked else transformers.AutoModelForCausalLM
    try:
        model = auto.from_pretrained(folder).eval()
    except ValueError as exc:  # transformers has no such head for this config
        kind = "masked" if masked else "causal"
        raise ValueError(
            f"--text: {name} ({getattr(config, 'model_type', None)}) does not load as a "
            f"{kind} language model (transformers' {auto.__name__} has no class for "
            f"{type(config).__name__}), which the analyses of a text run"
        ) from exc
    return model, tokenizer, (tokenizer.mask_token_id if masked else None)


def _check_tokenizer_files(name, folder):
    """A NAME whose folder (or the copy of its Hub repository) has none of
    ``probe.hub.TOKENIZER_FILES`` is refused (transformers would make a
    tokenizer of special tokens only)."""
    from .probe.hub import TOKENIZER_FILES

    if not os.path.isdir(folder):
        return
    if not any(f in TOKENIZER_FILES for f in os.listdir(folder)):
        raise _Failure(
            f"--text: {name} has no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...), "
            "so its text cannot be tokenized; give a model saved with its tokenizer"
        )


def _token_ids(tokenizer, text, limit):
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    if len(ids) < 5:
        raise _Failure(f"--text: {len(ids)} tokens; the analyses need at least 5")
    return ids[:limit]


def _run_text_analyses(name, analyses, text, out, entry, skipped=None, baselines=0, found=None):
    """The analyses of a model run on `text`; with `skipped` (a dict), one
    that does not apply to the model (rope_activations of a model without
    RoPE, a model transformers does not run as a language model) is recorded
    there instead of stopping the run.  `baselines`: the seeds of each
    measure's noise; `found` (a dict) receives each result by analysis."""
    from . import probe
    from .probe._common import max_positions, most_tokens

    found = {} if found is None else found
    chosen = [a for a in _TEXT_ANALYSES if a in analyses]
    try:
        model, tokenizer, mask = _language_model(name, entry)
    except ValueError as exc:
        if skipped is None:
            raise
        for what in chosen:
            skipped[what] = _one_line(exc)
        return
    table = max_positions(model)  # XLNet's max_position_embeddings is -1: no table
    limit = min(table, _MAX_TOKENS) if table is not None and table > 0 else _MAX_TOKENS
    ids = _token_ids(tokenizer, text, limit)
    out.append(f"--text: {len(ids)} tokens (at most {limit}) read by {type(model).__name__}")
    if "layer_probe" in analyses:
        r = probe.layer_position_probe(model, ids, seeds=3, baselines=baselines)
        maes = ", ".join(f"{m:.2f}" for m in r.mae)
        out.append(f"Position through the layers (absolute MAE, layer 0 = embeddings): {maes}.")
        out += [line for line in (r.noise_line(),) if line]
        entry["layer_probe"] = r.to_dict()
        found["layer_probe"] = r
    if "skip_perplexity" in analyses:
        most = most_tokens(model, max(_KS))
        short = ids if most is None else ids[:most]
        r = probe.skip_position_perplexity(
            model, short, ks=_KS, mask_token_id=mask, baselines=baselines
        )
        what = "pseudo-perplexity" if r.pseudo else "perplexity"
        figures = ", ".join(f"k={k}: {p:.3f}" for k, p in r.perplexity.items())
        ids_text = f"{r.first_id} + i*k" if r.first_id else "i*k"
        out.append(
            f"Skip-position attack ({what}, {r.n_tokens} tokens, ids {ids_text}): {figures}."
        )
        out += [line for line in (r.noise_line(),) if line]
        entry["skip_perplexity"] = r.to_dict()
        found["skip_perplexity"] = r
    many = ("rope_activations", "rope_logits", "relative_share")
    if any(a in analyses for a in many):
        texts = _paragraph_ids(tokenizer, text, limit)
        out.append(
            f"--text: {len(texts)} paragraphs read as texts of their own "
            f"({sum(len(t) for t in texts)} tokens, at most {limit} each)"
        )
        runs = (
            (
                "rope_activations",
                lambda: probe.rope_activation_usage(model, texts, baselines=baselines),
            ),
            ("rope_logits", lambda: probe.rope_logit_share(model, texts, name=name)),
            ("relative_share", lambda: probe.relative_share(model, texts, name=name)),
        )
        for what, run in runs:
            if what not in analyses:
                continue
            try:
                r = run()
            except ValueError as exc:
                if skipped is None:
                    raise
                skipped[what] = _one_line(exc)
            else:
                out.append(r.summary())
                noise = getattr(r, "noise_line", None)
                out += [line for line in ((noise() if noise else ""),) if line]
                entry[what] = r.to_dict()
                found[what] = r


def _alibi(name, text):
    """ALiBi's windows of a NAME: with a text, from the content logits'
    spread measured per head on its paragraphs; else for a spread of 1."""
    from . import probe

    windows = probe.alibi_windows(name)  # refuses a model without ALiBi before it is run
    if text is None:
        return windows
    model, tokenizer, _ = _language_model(name)
    model.set_attn_implementation("eager")  # the attention probabilities are returned
    texts = _paragraph_ids(tokenizer, text, _MAX_TOKENS)
    spread = probe.alibi_logit_spread(model, texts).mean(axis=0)
    return probe.alibi_windows(name, logit_spread=spread)


def _paragraph_ids(tokenizer, text, limit):
    """The token ids of each paragraph of `text` (blank-line separated) of
    at least 5 tokens, each cut to `limit`, at most :data:`_MAX_TEXTS`."""
    import re

    texts = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not paragraph.strip():
            continue
        ids = tokenizer(paragraph, add_special_tokens=True)["input_ids"][:limit]
        if len(ids) >= 5:
            texts.append(ids)
        if len(texts) == _MAX_TEXTS:
            break
    if not texts:
        raise _Failure("--text: no paragraph of at least 5 tokens; the analyses need one")
    return texts


def _table_extras(table, analyses, entry, seeds=0):
    """The table analyses run without the paper's probes: their sentences."""
    from . import probe

    lines = []
    if "properties" in analyses:
        r = probe.position_properties(table)
        lines.append(r.summary())
        entry["position_properties"] = r.to_dict()
    if "toeplitz" in analyses:
        r = probe.toeplitz_fit(table @ table.T)
        lines.append(r.summary())
        entry["toeplitz"] = r.to_dict()
    if "locality" in analyses:
        r = probe.attention_locality_symmetry(probe.position_attention(table))
        lines.append(r.summary())
        entry["locality_symmetry"] = r.to_dict()
    if seeds and lines:
        from .probe.report import noise_lines

        noise, said = noise_lines(table, [a for a in analyses if a in EXTRAS], seeds)
        lines = [line for pair in zip(lines, said) for line in pair]  # each under its own
        entry["baselines"] = {
            kind: {m: b.to_dict() for m, b in figures.items()} for kind, figures in noise.items()
        }
    return lines


def _probe_names(args, analyses):
    from . import probe

    if args.source is not None:
        raise _Failure("give either NAME ... or --source, not both")
    if len(args.names) > 1 and args.name is not None:
        raise _Failure("--name takes one NAME; probe the models one at a time")
    _check_outputs(args, [name for name in args.names if os.path.exists(name)])
    text = _read_text(args.text) if args.text is not None else None
    tables = any(a in _TABLE_ANALYSES for a in analyses)
    lenient = args.analyses == "all"  # what does not apply to a NAME is skipped, said why
    loaded = []
    for name in args.names:
        got, skipped = None, {}
        table, where, key, paper, note = None, name, None, None, ""
        if tables:
            try:
                table, where, key, paper, note, got = _load_named(name, args.key, args)
                table = probe._table(
                    table, f"the table in {where}", min_rows=5, max_rows=probe.MAX_POSITIONS
                )
            except probe._TooManyPositions as exc:
                raise _Failure(f"{exc}; {_slice_advice(name, args.key)}") from exc
            except ValueError as exc:
                if not lenient:
                    raise
                table, where, key, paper, note, got = None, name, None, None, "", None
                skipped["table analyses"] = _one_line(exc)
        loaded.append((name, table, where, key, paper, note, got, skipped))
    results, data, compared = [], [], []
    noise_seeds = 0 if args.no_baselines else min(args.seeds, _FORWARD_SEEDS)
    for name, table, where, key, paper, note, got, skipped in loaded:
        label = args.name or name
        entry = {"name": label, "analyses": list(analyses), "skipped": skipped}
        found, noise = {}, {}
        print(f"{label}: {where}" + (f"; {note}" if note else ""))
        print()
        if "paper" in analyses and table is not None:
            result = _report(table, label, analyses, args)
            print(result.to_markdown(published=False))
            lines = result.summaries()
            results.append((label, result, paper, note))
            entry.update(result.to_dict())
        elif table is not None:
            lines = _table_extras(table, analyses, entry, 0 if args.no_baselines else args.seeds)
        else:
            lines = []
        lines = list(lines)
        if "rope_usage" in analyses:
            try:
                usage = probe.rope_frequency_usage_from_checkpoint(name)
            except ValueError as exc:
                if not lenient and len(args.names) == 1:
                    raise
                skipped["rope_usage"] = _one_line(exc)
            else:
                fetched = usage.bytes_fetched
                lines.append(
                    usage.summary() + ("" if fetched is None else f" ({fetched:,} bytes fetched)")
                )
                entry["rope_usage"] = usage.to_dict()
                found["rope_usage"] = usage
                noise["rope_usage"] = _weight_noise("rope_usage", usage, noise_seeds, entry, lines)
        for what, run in (("alibi", _alibi), ("t5_biases", probe.t5_bucket_biases)):
            if what not in analyses:
                continue
            try:
                r = run(name) if what != "alibi" else run(name, text)
            except ValueError as exc:
                if not lenient and len(args.names) == 1:
                    raise
                skipped[what] = _one_line(exc)
            else:
                lines.append(r.summary())
                entry[what] = r.to_dict()
                found[what] = r
                noise[what] = _weight_noise(what, r, noise_seeds, entry, lines)
        if text is not None:
            several = lenient or len(args.names) > 1  # a model of another kind is skipped
            _run_text_analyses(
                name,
                analyses,
                text,
                lines,
                entry,
                skipped if several else None,
                baselines=noise_seeds,
                found=found,
            )
        lines += [f"{what}: skipped, {why}" for what, why in skipped.items()]
        for line in lines:
            print(line)
        print()
        entry.update(source=name, key=key, published_row=paper, rows_note=note)
        entry.update(rows=args.rows, paper_cut=not args.no_paper_cut)
        if got is not None:
            entry.update(
                repo_id=got.repo_id,
                revision=got.revision,
                commit=got.commit,
                file=got.filename,
                model_type=got.model_type,
                bytes_fetched=got.bytes_fetched,
                from_cache=got.from_cache,
            )
        data.append(entry)
        compared.append((label, found, noise))
    if results:
        print("Wang & Chen (2020), Tables 1 and 2, beside posenc:")
        print()
        print(_paper_table(results))
        for table in _side_by_side([r for _, r, _, _ in results]):
            print()
            print(table)
    if len(args.names) > 1:
        from .probe.compare import comparison_tables

        for table in comparison_tables(compared):
            print()
            print(table)
    if args.plot is not None and _plot_folder(args.plot):
        written = _plot_each(args.plot, results, compared)
        print(f"\nplots written to {args.plot}: {', '.join(written)}")
    elif args.plot is not None:
        if not results:
            raise _Failure(f"--plot: {args.names[0]} has no position table to draw; not written")
        if len(results) == 1:
            results[0][1].plot(args.plot)
        else:
            probe.plot_reports([r for _, r, _, _ in results], args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json is not None:
        run = _run_record(args, analyses, noise_seeds)
        with open(args.json, "w", encoding="utf-8") as f:
            if len(data) == 1:
                json.dump({**data[0], "run": run}, f, indent=1)
            else:
                json.dump({"run": run, "models": data}, f, indent=1)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0


#: The most seeds the noise of an analysis that runs a model takes (each
#: seed one more forward pass per kind of noise): the first min(--seeds, 3).
_FORWARD_SEEDS = 3


def _weight_noise(what, result, seeds, entry, lines):
    """The noise of an analysis of the weights (rope_usage, t5_biases), for
    seeds ``0 .. seeds-1``: recorded in `entry` and said under its line."""
    import numpy as np

    from .probe.compare import NOISE, spread, weight_noise

    noise = weight_noise(what, result, seeds)
    if noise:
        entry[what]["baselines"] = {
            kind: {m: spread(v) for m, v in figures.items()} for kind, figures in noise.items()
        }
        names = dict(NOISE[what])
        parts = [
            f"{names[kind]}: "
            + ", ".join(f"{m} {np.mean(v):.3f} ± {np.std(v):.3f}" for m, v in figures.items())
            for kind, figures in noise.items()
        ]
        lines.append(f"  noise (same measure, {seeds} seed{'s' if seeds > 1 else ''}): "
                     + "; ".join(parts) + ".")  # fmt: skip
    return noise


def _plot_folder(path):
    """Whether --plot names a folder (one that exists, or a path ending in a
    separator): one plot per analysis is written into it."""
    return os.path.isdir(path) or path.endswith(("/", os.sep))


def _plot_each(folder, results, compared):
    """One PNG per analysis in `folder`, a line or panel per model: the
    paper's probes (``paper.png``, :func:`probe.plot_reports`), Wang et al.'s
    proximity, the Toeplitz profile and the position attention per offset
    of each table, and each analysis of a model (``probe.compare``)."""
    from . import probe
    from .probe.compare import plot_analysis

    os.makedirs(folder, exist_ok=True)
    written = []
    reports = [r for _, r, _, _ in results]
    if reports:
        probe.plot_reports(reports, os.path.join(folder, "paper.png"))
        written.append("paper.png")
    for attr in ("properties", "toeplitz", "locality"):
        have = [r for r in reports if getattr(r, attr) is not None]
        if have:
            _plot_table_analysis(attr, have, os.path.join(folder, f"{attr}.png"))
            written.append(f"{attr}.png")
    for analysis in _MODEL_ANALYSES:
        if any(analysis in found for _, found, _ in compared):
            plot_analysis(analysis, compared, os.path.join(folder, f"{analysis}.png"))
            written.append(f"{analysis}.png")
    if not written:
        raise _Failure(f"--plot: no analysis ran that draws a figure; nothing written to {folder}")
    return written


def _plot_table_analysis(attr, reports, path):
    """A line per table: Wang et al.'s mean proximity per offset, the
    Toeplitz fit's diagonal means (both over their largest magnitude, so
    that tables of other norms compare), or the position attention's mean
    weight per offset."""
    import numpy as np

    from .probe._plots import _figure

    titles = {
        "properties": "Wang et al. 2021: mean proximity E[x].E[x+m] per offset (over its largest)",
        "toeplitz": "Wennberg & Henter 2021: mean of each diagonal of E E^T (over its largest)",
        "locality": "Chen et al. 2023: mean attention weight per offset, softmax(E E^T / sqrt d)",
    }

    def curve(result):
        y = result.diagonal_means if attr == "toeplitz" else result.mean_by_offset
        top = float(np.max(np.abs(y))) if len(y) else 0.0
        return result.offsets, (y / top if attr != "locality" and top > 0 else y)

    def draw(fig):
        ax = fig.add_subplot(1, 1, 1)
        for i, r in enumerate(reports):
            x, y = curve(getattr(r, attr))
            ax.plot(x, y, color=f"C{i % 10}", linewidth=1.0, label=r.name)
        ax.set_xlabel("offset")
        ax.set_title(titles[attr], fontsize=9)
        ax.legend(fontsize=7)

    _figure(path, 110, (11.0, 4.2), draw)


def _run_record(args, analyses, noise_seeds):
    """What reruns the report: posenc's version, the command's settings (every
    protocol setting, the noise's seeds), the text's SHA-256."""
    from ._version import __version__

    text = _text_record(args.text)
    return {
        "posenc_version": __version__,
        "names": list(args.names),
        "analyses": list(analyses),
        "seeds": args.seeds,
        "split": args.split,
        "regressor": args.regressor,
        "folds": args.folds,
        "pairs": args.pairs,
        "baselines": not args.no_baselines,
        "table_baseline_seeds": [] if args.no_baselines else list(range(args.seeds)),
        "model_baseline_seeds": list(range(noise_seeds)),
        "rows": args.rows,
        "paper_cut": not args.no_paper_cut,
        "key": args.key,
        "text": text,
        "layer_probe_seeds": 3,
        "skip_factors": list(_KS),
        "max_tokens": _MAX_TOKENS,
        "max_texts": _MAX_TEXTS,
    }


def _check_outputs(args, sources):
    """--plot and --json: each writable, neither a source (nor a checkpoint
    of a source directory), not the same file twice; the plot's format."""
    folder = args.plot is not None and _plot_folder(args.plot)
    if folder:
        parent = os.path.dirname(os.path.abspath(args.plot.rstrip("/" + os.sep) or "."))
        if not os.path.isdir(parent):
            raise _Failure(f"--plot: no such directory: {parent}")
        if os.path.exists(args.plot) and not os.path.isdir(args.plot):
            raise _Failure(f"--plot: {args.plot} names a folder but is a file")
        for source in sources:
            if os.path.isdir(source) and _same_file(args.plot.rstrip("/" + os.sep), source):
                raise _Failure(f"--plot: {args.plot} is a source folder; write the plots elsewhere")
    outputs = [(p, w) for p, w in ((args.plot, "--plot"), (args.json, "--json")) if p is not None]
    outputs = [(p, w) for p, w in outputs if not (folder and w == "--plot")]
    for path, what in outputs:
        _check_writable(path, what)
        for source in sources:
            _check_not_source(path, what, source)
    if len(outputs) == 2 and _same_file(args.plot, args.json):
        raise _Failure(
            f"--plot and --json name the same file ({args.plot}); give each its own file"
        )
    if args.plot is not None and not folder:
        _check_plot_format(args.plot)


def _check_counts(args):
    """The numbers of the command line, each within its bounds."""
    if args.seeds < 1:
        raise _Failure(f"--seeds must be >= 1, got {args.seeds}")
    if args.seeds > MAX_SEEDS:
        raise _Failure(
            f"--seeds must be at most {MAX_SEEDS} (the probes run once per seed), got {args.seeds}"
        )
    for value, flag, most in (
        (args.timeout, "--timeout", MAX_TIMEOUT),
        (args.deadline, "--deadline", MAX_DEADLINE),
    ):
        if value is not None and not (0 < value <= most):  # NaN fails too
            raise _Failure(f"{flag} must be a number of seconds in (0, {most:g}], got {value}")


def _probe(args):
    from .probe import hub

    _check_counts(args)
    limits = {
        k: v for k, v in (("timeout", args.timeout), ("deadline", args.deadline)) if v is not None
    }
    with hub.limits(**limits):
        return _probe_checked(args)


def _probe_checked(args):
    from . import probe, sinusoid
    from .probe._loading import load_table

    analyses = _analyses(args.analyses)
    _check_analyses(args, analyses)
    analyses = _applicable(args, analyses)
    if args.names:
        return _probe_names(args, analyses)
    if args.key is not None and args.source is None:
        raise _Failure("--key needs --source")
    _check_outputs(args, [] if args.source is None else [args.source])

    if args.source is None:
        table = sinusoid(512, 768, dtype="float64")
        name = args.name or "sinusoid 512x768"
        where = "built in: posenc.sinusoid(512, 768), base 10000, interleaved"
        key = None
    try:
        if args.source is not None:
            loaded, key = load_table(args.source, args.key, max_rows=probe.MAX_POSITIONS)
            table, _, note = _rows_of(probe._to_numpy(loaded), _local_config(args.source), args)
            where = args.source + (f" [{key}]" if key else "") + f"; {note}"
            name = args.name or os.path.basename(os.path.normpath(args.source))
        table = probe._table(
            table, f"the table in {where}", min_rows=5, max_rows=probe.MAX_POSITIONS
        )
    except probe._TooManyPositions as exc:
        raise _Failure(f"{exc}; {_slice_advice(args.source, args.key)}") from exc

    print(f"{name}: {where}")
    print()
    data = {"name": name, "analyses": list(analyses)}
    if "paper" in analyses:
        result = _report(table, name, analyses, args)
        print(result.to_markdown())
        lines = result.summaries()
        data.update(result.to_dict())
    else:
        lines = _table_extras(table, analyses, data, 0 if args.no_baselines else args.seeds)
    for line in lines:
        print(line)
    if args.plot is not None and _plot_folder(args.plot):
        written = _plot_each(
            args.plot, [(name, result, None, None)] if "paper" in analyses else [], []
        )
        print(f"\nplots written to {args.plot}: {', '.join(written)}")
    elif args.plot is not None:
        result.plot(args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json is not None:
        data["source"] = args.source
        data["key"] = key
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0


#: The figures of each analysis set side by side, by (title, measure, attribute path).
_SIDE_BY_SIDE = (
    (
        "Wang et al. 2021 properties",
        "properties",
        (
            ("monotonicity forward", "monotonicity_forward"),
            ("monotonicity backward", "monotonicity_backward"),
            ("translation invariance", "translation_invariance"),
            ("symmetry", "symmetry"),
        ),
    ),
    ("Wennberg & Henter 2021", "toeplitz", (("Toeplitz R²", "r2"),)),
    (
        "Chen et al. 2023",
        "locality",
        (("locality", "locality"), ("symmetry", "symmetry")),
    ),
)
_BASELINE_NAMES = {
    ("properties", "symmetry"): "symmetry",
    ("toeplitz", "r2"): "toeplitz_r2",
    ("locality", "locality"): "locality",
    ("locality", "symmetry"): "attention_symmetry",
}


def _side_by_side(reports):
    """One Markdown table per analysis of several reports: a row a model, each
    figure beside its noise (random table; rows shuffled) where measured."""
    if len(reports) < 2:
        return []
    tables = []
    for title, attr, figures in _SIDE_BY_SIDE:
        if not all(getattr(r, attr) is not None for r in reports):
            continue
        head = " | ".join(label for label, _ in figures)
        lines = [f"{title}, side by side (noise: random table / rows shuffled):", ""]
        lines.append(f"| model | {head} |")
        lines.append("|---|" + "---:|" * len(figures))
        for r in reports:
            cells = []
            for _, name in figures:
                value = float(getattr(getattr(r, attr), name))
                base = _BASELINE_NAMES.get((attr, name), name)
                cell = f"{value:.3f}"
                if r.baselines:
                    rnd, shf = r.baselines["random"][base], r.baselines["shuffled"][base]
                    cell += f" ({rnd.mean:.3f} / {shf.mean:.3f})"
                cells.append(cell)
            lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
        tables.append("\n".join(lines))
    return tables


def _report(table, name, analyses, args):
    """:func:`probe.report` of `table` with the command line's seeds,
    progress bar, extra analyses and protocol."""
    from . import probe

    extras = tuple(a for a in analyses if a in EXTRAS)
    progress = not args.no_progress
    return probe.report(
        table, name=name, seeds=args.seeds, progress=progress, extras=extras, **_protocol(args)
    )


def _protocol(args):
    """The probes' settings of the command line, as :func:`probe.report` takes them."""
    return {
        "split": args.split,
        "regressor": args.regressor,
        "folds": args.folds,
        "pairs": args.pairs,
        "baselines": not args.no_baselines,
    }


def _text_record(path):
    """A run's --text as its JSON records it (path and SHA-256), or None."""
    if path is None:
        return None
    import hashlib

    with open(path, "rb") as f:
        return {"path": path, "sha256": hashlib.sha256(f.read()).hexdigest()}


def _one_line(exc):
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    name = type(exc).__name__
    if isinstance(exc, (MemoryError, RecursionError, AttributeError)) and text != name:
        text = f"{name}: {text}"  # not self-explanatory without the name
    return " ".join(text.split())


# ---------------------------------------------------------------- posenc context

_CONTEXT_HELP = """\
Measure what RoPE scaling methods do to a model's long context, each method
applied in turn to the same loaded model (posenc.hf.patch(model, scaling=M),
then unpatch; "none" is the model as loaded): sliding-window perplexity at
each length and the loss by position in the window (on --text FILE or
--dataset NAME), and with --passkey, passkey retrieval (a key hidden at
several depths of filler text, read back by greedy decoding; Mohtashami &
Jaggi 2023, as YaRN's evaluation runs it).  One table, a row per method and
a column per length; --json writes every figure and what reruns them,
--plot the figure (perplexity against length, a line per method; the loss
by position; a passkey heatmap per method).  With --attention N, the
attention by query-key distance too, on the text's first N tokens read in
one pass per method (transformers' eager attention): per layer the mean
entropy and distance attended, its figure written beside --plot's
(FILE-attention.png for FILE.png).

MODEL is a model folder or a Hub name (org/name or org/name@revision),
read by transformers' from_pretrained: the Hugging Face cache, token
(HF_TOKEN, hf auth login) and endpoint (HF_ENDPOINT) are the user's, and
HF_HUB_OFFLINE=1 reads the cache alone.  The config is read first: a model
that is not rotary, and a length whose weights, KV cache, logits and
activations are estimated above the device's free memory, are refused
before the weights are loaded.

--methods: comma-separated, e.g. none,linear:4,ntk:4,dynamic:4,yarn:4,llama3:8
(see posenc.hf.patch for the strings).  --dataset NAME[:CONFIG[:SPLIT]] reads
the split (default test) of a data set through the datasets library
(pip install "posenc[context]"), streamed, its texts (--column, default
text) joined by blank lines as Hugging Face's perplexity recipe does;
--tokens N evaluates the first N tokens at every length."""


def _context_parser(sub):
    ctx = sub.add_parser(
        "context",
        help="a RoPE model's perplexity by context length and passkey retrieval, per "
        "scaling method",
        description=_CONTEXT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ctx.add_argument("model", metavar="MODEL", help="a model folder or a Hub name (org/name)")
    ctx.add_argument(
        "--methods",
        default="none",
        metavar="LIST",
        help="comma-separated scaling methods (default: none, the model as loaded)",
    )
    ctx.add_argument(
        "--lengths", required=True, metavar="LIST", help="comma-separated context lengths"
    )
    source = ctx.add_mutually_exclusive_group()
    source.add_argument("--text", metavar="FILE", help="a UTF-8 text file, for the perplexity")
    source.add_argument(
        "--dataset",
        metavar="NAME[:CONFIG[:SPLIT]]",
        help="a data set's split (default test), for the perplexity",
    )
    ctx.add_argument(
        "--column", default="text", help="--dataset: the column of the texts (default text)"
    )
    ctx.add_argument(
        "--tokens", type=int, metavar="N", help="evaluate the first N tokens of the text"
    )
    ctx.add_argument(
        "--stride",
        type=int,
        metavar="N",
        help="tokens between the starts of the sliding windows (default: each length)",
    )
    ctx.add_argument("--passkey", action="store_true", help="run passkey retrieval too")
    ctx.add_argument(
        "--attention",
        type=int,
        metavar="N",
        help="attention by query-key distance on the text's first N tokens, per method",
    )
    ctx.add_argument(
        "--depths",
        default=",".join(f"{d:g}" for d in _PASSKEY_DEPTHS),
        metavar="LIST",
        help="--passkey: where the key stands, 0 (first) to 1 (last)",
    )
    ctx.add_argument(
        "--trials", type=int, default=5, metavar="N", help="--passkey: keys per length and depth"
    )
    ctx.add_argument("--device", default="cpu", help="torch device (default cpu)")
    ctx.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16", "float64"),
        help="the dtype the model runs in (default: the checkpoint's)",
    )
    ctx.add_argument("--json", metavar="FILE", help="write every figure to this JSON file")
    ctx.add_argument(
        "--plot", metavar="FILE", help="write the figure to this file (.png, .pdf, .svg, ...)"
    )
    ctx.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


#: The passkey's depths by default (posenc.context.DEPTHS).
_PASSKEY_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _int_list(text, flag, minimum):
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise _Failure(f"{flag}: {part!r} is not a whole number") from None
        if value < minimum:
            raise _Failure(f"{flag}: {value} is below {minimum}")
        values.append(value)
    if not values:
        raise _Failure(f"{flag}: give at least one number")
    if len(set(values)) != len(values):
        raise _Failure(f"{flag}: {text} names a length twice")
    return sorted(values)


def _float_list(text, flag):
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise _Failure(f"{flag}: {part!r} is not a number") from None
        if not 0.0 <= value <= 1.0:
            raise _Failure(f"{flag}: {part} is outside [0, 1]")
        values.append(value)
    if not values or len(set(values)) != len(values):
        raise _Failure(f"{flag}: give distinct numbers in [0, 1]")
    return values


def _context_checks(args):
    """Every option checked before anything is loaded: ``(lengths, methods, depths)``."""
    lengths = _int_list(args.lengths, "--lengths", 2)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise _Failure("--methods: name at least one method (none: the model as loaded)")
    if len(set(methods)) != len(methods):
        raise _Failure(f"--methods: {args.methods} names a method twice")
    if args.text is None and args.dataset is None and not args.passkey:
        raise _Failure(
            "nothing to measure: give --text FILE or --dataset NAME (perplexity), --passkey, "
            "or both"
        )
    for value, flag in ((args.tokens, "--tokens"), (args.stride, "--stride")):
        if value is not None and value < 1:
            raise _Failure(f"{flag} must be >= 1, got {value}")
    if args.stride is not None and args.stride > lengths[0]:
        raise _Failure(
            f"--stride must be at most the shortest length ({lengths[0]}), got {args.stride}"
        )
    if args.attention is not None:
        if args.attention < 2:
            raise _Failure(f"--attention must be >= 2 tokens, got {args.attention}")
        if args.text is None and args.dataset is None:
            raise _Failure("--attention reads the text: give --text FILE or --dataset NAME")
    if args.tokens is not None and args.tokens < lengths[-1]:
        raise _Failure(f"--tokens {args.tokens} is fewer than the longest length {lengths[-1]}")
    if args.trials < 1:
        raise _Failure(f"--trials must be >= 1, got {args.trials}")
    depths = _float_list(args.depths, "--depths")
    _check_device(args.device)
    outputs = [(p, w) for p, w in ((args.plot, "--plot"), (args.json, "--json")) if p]
    for path, what in outputs:
        _check_writable(path, what)
    if len(outputs) == 2 and _same_file(args.plot, args.json):
        raise _Failure(f"--plot and --json name the same file ({args.plot})")
    if args.plot is not None:
        _check_plot_format(args.plot)
    return lengths, methods, depths


def _check_device(name):
    """--device: a device torch knows, and has."""
    from .probe._optional import require

    require("torch", "posenc context", extra="context")
    from ._torch_args import available_device

    try:
        available_device(name)
    except ValueError as exc:
        raise _Failure(f"--device {name}: {_one_line(exc)}") from exc


def _torch_dtype(args, config):
    """The torch dtype the model runs in: --dtype, else the checkpoint's
    (float32 when it names none)."""
    import torch

    name = args.dtype
    if name == "auto":
        found = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        name = str(found).replace("torch.", "") if found is not None else "float32"
        if name not in ("float32", "bfloat16", "float16", "float64"):
            name = "float32"
    return getattr(torch, name), name


def _check_memory(args, config, lengths, dtype_name):
    """The longest length's estimate (and --attention's, eager) set against
    the device's free memory."""
    from .context import _load, estimate_memory, free_memory

    try:
        free = free_memory(args.device)
    except (RuntimeError, AssertionError, ValueError) as exc:  # no such device
        raise _Failure(f"--device {args.device}: {_one_line(exc)}") from exc
    parameters = _load.parameter_count(config)
    runs = [("--lengths", lengths[-1], False)]
    if args.attention is not None:
        runs.append(("--attention", args.attention, True))
    for flag, length, eager in runs:
        estimate = estimate_memory(
            config, length, dtype=dtype_name, parameters=parameters, eager=eager
        )
        if free is not None and estimate.total > free:
            from .context._memory import gib

            raise _Failure(
                f"{flag} {length} will not fit in memory: it needs {estimate.describe()} "
                f"in {dtype_name}, and {args.device} has {gib(free)} free; give "
                f"{'shorter lengths' if flag == '--lengths' else 'fewer tokens'}, "
                "--dtype bfloat16, or a --device with more memory"
            )


def _context_tokens(args, tokenizer):
    """The text's token ids (None without --text or --dataset)."""
    from .context import _load

    if args.text is not None:
        text = _load.read_text(args.text)
        ids = tokenizer(text)["input_ids"]
        ids = [int(i) for i in (ids if args.tokens is None else ids[: args.tokens])]
    elif args.dataset is not None:
        ids = _load.tokens_of_texts(
            tokenizer, _load.dataset_texts(args.dataset, args.column), args.tokens
        )
    else:
        return None
    return ids


def _context_record(args, lengths, methods, depths, ids, config, dtype_name):
    """What reruns the measurement: posenc's version, every setting, the
    text's SHA-256 or the data set, the model's commit where the Hub gave one."""
    from ._version import __version__
    from .context import _load

    text = _text_record(args.text)
    return {
        "posenc_version": __version__,
        "model": args.model,
        "model_type": getattr(config, "model_type", None),
        "model_commit": _load.commit_of(args.model),
        "methods": methods,
        "lengths": lengths,
        "stride": args.stride,
        "text": text,
        "dataset": None if args.dataset is None else {"spec": args.dataset, "column": args.column},
        "tokens": None if ids is None else len(ids),
        "passkey": None
        if not args.passkey
        else {"depths": depths, "trials": args.trials, "seed": 0},
        "attention_tokens": args.attention,
        "device": args.device,
        "dtype": dtype_name,
    }


def _context(args):
    from .context._common import is_terminal

    lengths, methods, depths = _context_checks(args)
    with _library_bars(not args.no_progress and is_terminal(sys.stderr)):
        return _context_run(args, lengths, methods, depths)


@contextlib.contextmanager
def _library_bars(shown):
    """transformers' and huggingface_hub's progress bars, on a terminal only
    (and not with --no-progress); as they were after."""
    if shown:
        yield
        return
    from .probe._optional import require

    logging = require("transformers.utils.logging", "posenc context", extra="context")
    hub_utils = require("huggingface_hub.utils", "posenc context", extra="context")
    were = logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    logging.disable_progress_bar()
    hub_utils.disable_progress_bars()
    try:
        yield
    finally:
        if were[0]:
            logging.enable_progress_bar()
        if not were[1]:
            hub_utils.enable_progress_bars()


def _context_run(args, lengths, methods, depths):
    from . import context
    from .context import _load
    from .context import passkey as passkey_module
    from .context._common import check_rotary, not_rotary
    from .probe.biases import model_kind

    try:
        config = _load.load_config(args.model)
        if model_kind(config) != "rope":
            raise _Failure(not_rotary(config, args.model))
        tokenizer = _load.load_tokenizer(args.model)
        dtype, dtype_name = _torch_dtype(args, config)
        _check_memory(args, config, lengths, dtype_name)
        ids = _context_tokens(args, tokenizer)
        where = args.text if args.text is not None else f"--dataset {args.dataset}"
        if ids is not None and len(ids) < lengths[-1]:
            raise _Failure(
                f"{where}: {len(ids)} tokens, fewer than the longest length {lengths[-1]}; "
                "give a longer text or shorter lengths"
            )
        if ids is not None and args.attention is not None and len(ids) < args.attention:
            raise _Failure(f"{where}: {len(ids)} tokens, fewer than --attention {args.attention}")
        if args.passkey:  # every prompt fits its length, checked before the weights load
            passkey_module.plans(tokenizer, passkey_module.PasskeyPrompt(), lengths, depths, 1, 0)
        model = _load.load_model(args.model, dtype, args.device)
        check_rotary(model, args.model)
    except (_load.LoadError, ValueError) as exc:
        raise _Failure(str(exc)) from exc
    result = context.compare(
        model,
        ids,
        methods=methods,
        lengths=lengths,
        tokenizer=tokenizer,
        passkey=args.passkey,
        stride=args.stride,
        depths=depths,
        trials=args.trials,
        progress=not args.no_progress,
    )
    attention = None
    if args.attention is not None:
        assert ids is not None
        attention = context.attention_by_distance(
            model, ids[: args.attention], methods=methods, progress=not args.no_progress
        )
    n = "" if ids is None else f"; {len(ids)} tokens of text"
    print(f"{args.model} ({getattr(config, 'model_type', None)}, {dtype_name}, {args.device}{n})")
    print()
    print(result.to_markdown())
    if attention is not None:
        print()
        print(attention.to_markdown())
    if args.plot is not None:
        result.plot(args.plot)
        print(f"\nplot written to {args.plot}")
        if attention is not None:
            stem, suffix = os.path.splitext(args.plot)
            path = f"{stem}-attention{suffix}"
            attention.plot(path)
            print(f"attention plot written to {path}")
    if args.json is not None:
        record = _context_record(args, lengths, methods, depths, ids, config, dtype_name)
        figures = result.to_dict()
        if attention is not None:
            figures["attention"] = attention.to_dict()
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"run": record, **figures}, f, indent=1)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0


# ---------------------------------------------------------------- posenc lab

_LAB_HELP = """\
Train the same small pre-LN Transformer with each position encoding and
evaluate it at and beyond its training length: exact-match accuracy on a
length-generalization task (--task copy, reverse, counting, selective_copy,
flip_flop, associative_recall, addition), perplexity on a text (--task lm
--text FILE, byte-level or --tokenizer NAME; with the skip-position attack),
or accuracy on a classification data set (--task classification --dataset
sst2, trec, subj, cr, mr, mpqa, or a .csv/.jsonl file; a 1-layer encoder as
Wang & Chen's, beside their published table).  One table, a row per
encoding and a column per length, mean and standard deviation over the
seeds; --json writes every figure, setting and version, --plot the figure.

--encodings: comma-separated names of posenc.lab.ENCODINGS with options
after colons and a training-time position sampler after a plus, e.g.
nope,rope,rope:yarn:4,rope:xpos,rope:p:0.75,alibi,t5,kerple_log,fire,cope,xl,
sinusoid,learned:sinusoid,complex_order,alibi+randomized,rope+pose:512.

Under torchrun (torchrun --nproc_per_node N -m posenc lab ...) each run
trains data-parallel over the processes (--parallel data, the default), or
the runs (encodings x seeds) are dealt out to them (--parallel grid); one
process prints and writes the files.  --checkpoint-dir DIR keeps a
checkpoint per run, from which the same command resumes."""


def _lab_parser(sub):
    lab = sub.add_parser(
        "lab",
        help="train a small Transformer with each position encoding, evaluate it by length",
        description=_LAB_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lab.add_argument(
        "--task", required=True, help="a task name, lm (with --text) or classification"
    )
    lab.add_argument("--encodings", required=True, metavar="LIST", help="comma-separated encodings")
    lab.add_argument("--train-length", type=int, metavar="N", help="the training length")
    lab.add_argument(
        "--eval-lengths", metavar="LIST", help="comma-separated lengths (default: the training one)"
    )
    lab.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds 0..N-1 (default 3)")
    lab.add_argument("--steps", type=int, default=1000, metavar="N", help="training steps")
    lab.add_argument("--batch-size", type=int, default=32, metavar="N", help="global batch")
    lab.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    lab.add_argument(
        "--schedule",
        default="cosine",
        choices=("cosine", "constant"),
        help="after the warmup (default cosine, to a tenth of --lr)",
    )
    lab.add_argument("--warmup", type=int, metavar="N", help="warmup steps (default steps/10)")
    lab.add_argument("--dim", type=int, default=32, help="model width (default 32)")
    lab.add_argument("--layers", type=int, help="blocks (default 2; 1 for classification)")
    lab.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    lab.add_argument("--ffn", type=int, help="feed-forward width (default 4 x --dim)")
    lab.add_argument("--text", metavar="SOURCE", help="--task lm: a file, folder or datasets:NAME")
    lab.add_argument(
        "--tokenizer", default="bytes", help="--task lm: bytes or a tokenizer name (default bytes)"
    )
    lab.add_argument("--dataset", metavar="SOURCE", help="--task classification: a name or file")
    lab.add_argument(
        "--eval-samples", type=int, default=256, metavar="N", help="sequences per length (tasks)"
    )
    lab.add_argument(
        "--eval-tokens", type=int, default=16384, metavar="N", help="tokens per length (lm)"
    )
    lab.add_argument("--device", default="cpu", help="torch device (default cpu)")
    lab.add_argument("--bf16", action="store_true", help="bfloat16 autocast in the forward passes")
    lab.add_argument("--checkpoint-dir", metavar="DIR", help="a checkpoint per run; resumes")
    lab.add_argument(
        "--parallel",
        default="data",
        choices=("data", "grid"),
        help="under torchrun: data-parallel runs, or the runs dealt out (default data)",
    )
    lab.add_argument("--json", metavar="FILE", help="write every figure and setting here")
    lab.add_argument("--plot", metavar="FILE", help="write the figure here (.png, .pdf, .svg)")
    lab.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _lab_checks(args):
    """The options checked before anything trains: ``(encodings, eval_lengths)``."""
    from .lab import encoding
    from .lab.tasks import TASKS

    if args.task not in ("lm", "classification", *TASKS):
        raise _Failure(f"--task {args.task}: not a task (lm, classification, {', '.join(TASKS)})")
    names = [e.strip() for e in args.encodings.split(",") if e.strip()]
    if not names:
        raise _Failure("--encodings: name at least one encoding")
    try:
        encodings = [encoding(e) for e in names]
    except (TypeError, ValueError) as exc:
        raise _Failure(f"--encodings: {_one_line(exc)}") from exc
    for value, flag, low in (
        (args.seeds, "--seeds", 1),
        (args.steps, "--steps", 1),
        (args.batch_size, "--batch-size", 1),
        (args.dim, "--dim", 2),
        (args.heads, "--heads", 1),
        (args.layers, "--layers", 1),
        (args.ffn, "--ffn", 1),
        (args.train_length, "--train-length", 1),
        (args.warmup, "--warmup", 0),
        (args.eval_samples, "--eval-samples", 1),
        (args.eval_tokens, "--eval-tokens", 1),
    ):
        if value is not None and value < low:
            raise _Failure(f"{flag} must be >= {low}, got {value}")
    if not args.lr > 0:
        raise _Failure(f"--lr must be > 0, got {args.lr}")
    lengths = (
        None if args.eval_lengths is None else _int_list(args.eval_lengths, "--eval-lengths", 1)
    )
    if args.task != "classification" and args.train_length is None:
        raise _Failure(f"--task {args.task} needs --train-length")
    if args.task == "lm" and args.text is None:
        raise _Failure("--task lm needs --text (a file, a folder or datasets:NAME)")
    if args.task == "classification" and args.dataset is None:
        raise _Failure("--task classification needs --dataset (sst2, trec, ... or a file)")
    if args.text is not None and args.task != "lm":
        raise _Failure("--text is for --task lm")
    if args.dataset is not None and args.task != "classification":
        raise _Failure("--dataset is for --task classification")
    _check_device(args.device)
    outputs = [(p, w) for p, w in ((args.plot, "--plot"), (args.json, "--json")) if p]
    for path, what in outputs:
        _check_writable(path, what)
    if len(outputs) == 2 and _same_file(args.plot, args.json):
        raise _Failure(f"--plot and --json name the same file ({args.plot})")
    if args.plot is not None:
        _check_plot_format(args.plot)
    return encodings, lengths


def _lab(args):
    from . import lab
    from .lab.train import TrainConfig, world

    encodings, lengths = _lab_checks(args)
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        schedule=args.schedule,
        warmup=args.warmup,
        device=args.device,
        autocast="bfloat16" if args.bf16 else None,
        eval_samples=args.eval_samples,
        eval_tokens=args.eval_tokens,
    )
    result = lab.compare(
        encodings,
        args.task,
        train_length=args.train_length,
        eval_lengths=lengths,
        seeds=args.seeds,
        text=args.text,
        tokenizer=args.tokenizer,
        dataset=args.dataset,
        dim=args.dim,
        layers=args.layers,
        heads=args.heads,
        ffn=args.ffn,
        config=config,
        checkpoint_dir=args.checkpoint_dir,
        parallel=args.parallel,
        progress=not args.no_progress,
    )
    if world()[0] != 0:  # one process of a torchrun launch reports
        return 0
    print(result.to_markdown())
    if args.plot is not None:
        result.plot(args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=1)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "info":
        from . import show_config

        show_config()
        return 0
    try:
        run = {"probe": _probe, "context": _context, "lab": _lab}[args.command]
        return run(args)
    except (
        _Failure,
        OSError,
        ValueError,
        TypeError,
        KeyError,
        ImportError,
        # not expected from any input (the loader and the bound on rows keep
        # them away), but a one-line error is better than a traceback
        MemoryError,
        RecursionError,
        AttributeError,
    ) as exc:
        print(f"{_PROG} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
