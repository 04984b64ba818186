"""The probe guide's side-by-side report, made by ``posenc probe`` itself.

Five tiny transformers models of random weights (seeded: a GPT-2, a BERT, a
RoBERTa, a Llama and a T5, each a few thousand parameters, saved with a
word-level tokenizer) and a text of three paragraphs are written under the
output folder, and one command line runs every analysis that applies to
each::

    posenc probe gpt2-tiny bert-tiny roberta-tiny llama-tiny t5-tiny \\
        --analyses all --text text.txt --seeds 3 --no-progress \\
        --plot probe_report/ --json probe_report.json

(run in the output folder, so that the names are those).  Its text output
goes to ``probe_report.md`` (a code block, which the guide includes), its
plots, one per analysis, to ``probe_report/``, its JSON beside them.  The
docs build runs it (docs/conf.py), as ``tests/test_probe_side_by_side.py``
does; by hand::

    python docs/make_probe_report.py [--out docs/_generated]

It needs torch, transformers, tokenizers, scikit-learn and matplotlib;
without them ``probe_report.md`` says so and nothing else is written.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import sys

import report_snapshot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: what the docs include, kept in docs/reports/ for a build without torch
KEPT = ("probe_report.md", "probe_report")

#: The models, in the order of the command line.
NAMES = ("gpt2-tiny", "bert-tiny", "roberta-tiny", "llama-tiny", "t5-tiny")

#: The text: three paragraphs of the tokenizer's words.
TEXT = (
    "the quick brown fox jumps over the lazy dog and the dog sleeps on .\n\n"
    "a lazy cat sees the quick fox and the brown dog jumps over the cat .\n\n"
    "the dog and the cat and the fox sleep on the brown mat over the day ."
)

#: RoBERTa's special tokens first (pad 1, mask 4), then the words of TEXT.
WORDS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] + sorted(set(TEXT.split()))

#: The command line's options after the names.
OPTIONS = ("--analyses", "all", "--text", "text.txt", "--seeds", "3", "--no-progress")


def _tokenizer():
    import tokenizers
    import transformers

    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", mask_token="<mask>", pad_token="<pad>"
    )


def models():
    """``{name: model}``: the five tiny models, each made from seed 0."""
    import torch
    import transformers as t

    v = len(WORDS)
    block = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    specs = {
        "gpt2-tiny": (
            t.GPT2LMHeadModel,
            t.GPT2Config(
                n_positions=64,
                n_embd=16,
                n_layer=2,
                n_head=2,
                vocab_size=v,
                bos_token_id=0,
                eos_token_id=2,
            ),
        ),
        "bert-tiny": (
            t.BertForMaskedLM,
            t.BertConfig(vocab_size=v, max_position_embeddings=48, **block),
        ),
        "roberta-tiny": (
            t.RobertaForMaskedLM,
            t.RobertaConfig(vocab_size=v, max_position_embeddings=66, pad_token_id=1, **block),
        ),
        "llama-tiny": (
            t.LlamaForCausalLM,
            t.LlamaConfig(
                vocab_size=v,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                rope_theta=10000.0,
            ),
        ),
        "t5-tiny": (
            t.T5ForConditionalGeneration,
            t.T5Config(vocab_size=v, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2),
        ),
    }
    out = {}
    for name, (cls, config) in specs.items():
        torch.manual_seed(0)
        out[name] = cls(config).eval()
    return out


def save(folder):
    """The five models, each with the tokenizer, and ``text.txt``, under `folder`."""
    tokenizer = _tokenizer()
    os.makedirs(folder, exist_ok=True)
    for name, model in models().items():
        model.save_pretrained(os.path.join(folder, name))
        tokenizer.save_pretrained(os.path.join(folder, name))
    with open(os.path.join(folder, "text.txt"), "w", encoding="utf-8") as f:
        f.write(TEXT + "\n")


def run(folder):
    """The command line, run in `folder`: ``(exit status, its stdout)``."""
    from posenc.__main__ import main

    argv = ["probe", *NAMES, *OPTIONS, "--plot", "probe_report/", "--json", "probe_report.json"]
    here = os.getcwd()
    buffer = io.StringIO()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(buffer):
            code = main(argv)
    finally:
        os.chdir(here)
    return code, buffer.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "_generated"))
    parser.add_argument(
        "--snapshot", action="store_true", help="keep what is made in docs/reports/ too"
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    page = os.path.join(args.out, "probe_report.md")
    try:
        for module in ("torch", "transformers", "tokenizers", "sklearn", "matplotlib"):
            __import__(module)
    except ImportError as exc:
        # the copy kept in the repository (docs/report_snapshot.py)
        if not report_snapshot.restore(args.out, KEPT):
            with open(page, "w", encoding="utf-8") as f:
                f.write(f"(not made here: {exc.name} is not installed)\n")
        return 0
    save(args.out)
    code, out = run(args.out)
    if code != 0:
        raise SystemExit(f"posenc probe failed ({code}):\n{out}")
    command = "posenc probe " + " ".join(NAMES) + " " + " ".join(OPTIONS)
    with open(page, "w", encoding="utf-8") as f:
        f.write(f"```text\n$ {command} --plot probe_report/ --json probe_report.json\n{out}```\n")
    if args.snapshot:
        report_snapshot.keep(args.out, KEPT)
    return 0


if __name__ == "__main__":
    ROOT = os.path.dirname(HERE)
    if glob.glob(os.path.join(ROOT, "posenc", "_core*.so")) + glob.glob(
        os.path.join(ROOT, "posenc", "_core*.pyd")
    ):
        sys.path.insert(0, ROOT)  # this tree, built in place, as docs/conf.py takes it
    sys.exit(main())
