"""The context guide's table and figure, made by ``posenc context`` itself.

A tiny Llama of random weights (seeded; 128 positions, hidden 32, two
layers), a WordPiece tokenizer of the passkey prompt's words and the
digits, and a text of those words drawn at random are written under the
output folder, and one command line measures it::

    posenc context llama-tiny --methods none,linear:4,yarn:4 --lengths 128,256,512 \\
        --text text.txt --passkey --trials 2 --no-progress \\
        --plot context_report.png --json context_report.json

(run in the output folder; the methods other than ``none`` only where
``posenc.hf.patch`` takes ``scaling=``).  Its text output goes to
``context_report.md`` (a code block, which the guide includes), its figure
to ``context_report.png``, its JSON beside them.  A random model knows no
language: its perplexity is about its vocabulary's size at every length
and it finds no key, so the figure shows what the measurements draw, not
a finding.  The docs build runs it (docs/conf.py), as
``tests/test_context.py`` does; by hand::

    python docs/make_context_report.py [--out docs/_generated]

It needs torch, transformers, tokenizers and matplotlib; without them
``context_report.md`` says so and nothing else is written.
"""

from __future__ import annotations

import inspect
import os
import sys

import report_snapshot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: what the docs include, kept in docs/reports/ for a build without torch
KEPT = ("context_report.md", "context_report.png")

#: The model's folder under the output folder.
NAME = "llama-tiny"
#: The context lengths measured (the model has 128 positions).
LENGTHS = "128,256,512"
#: The methods beside the model as loaded, where posenc.hf.patch takes scaling=.
SCALED = ("linear:4", "yarn:4")
#: The tokens of the text.
TOKENS = 1200


def methods():
    """``none``, and the scaled methods where ``posenc.hf.patch`` takes them."""
    from posenc import hf

    takes = "scaling" in inspect.signature(hf.patch).parameters
    return ("none", *SCALED) if takes else ("none",)


def options():
    """The command line's options after the model's name."""
    return [
        "--methods",
        ",".join(methods()),
        "--lengths",
        LENGTHS,
        "--text",
        "text.txt",
        "--passkey",
        "--trials",
        "2",
        "--no-progress",
    ]


def _words():
    from posenc.context import PasskeyPrompt

    p = PasskeyPrompt()
    text = " ".join((p.task, p.filler, p.needle.replace("{key}", " "), p.question))
    for mark in ".?":
        text = text.replace(mark, f" {mark} ")
    return sorted(set(text.split()))


def tokenizer():
    """A WordPiece tokenizer of the prompt's words, the digits and ``##`` digits."""
    import tokenizers
    import transformers

    vocab = ["[UNK]", "[BOS]", "[EOS]", *_words()]
    vocab += [str(d) for d in range(10)] + [f"##{d}" for d in range(10)]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


def model(vocab_size):
    """The tiny Llama, made from seed 0."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def save(folder):
    """The model with its tokenizer, and ``text.txt``, under `folder`."""
    import numpy as np

    tok = tokenizer()
    os.makedirs(folder, exist_ok=True)
    model(len(tok)).save_pretrained(os.path.join(folder, NAME))
    tok.save_pretrained(os.path.join(folder, NAME))
    words = np.random.default_rng(0).choice(_words(), TOKENS)
    with open(os.path.join(folder, "text.txt"), "w", encoding="utf-8") as f:
        f.write(" ".join(words) + "\n")


def run(folder):
    """The command line, run in `folder`: ``(exit status, its stdout)``."""
    return report_snapshot.run_cli(folder, cli())


def cli():
    return ["context", NAME, *options(), "--plot", "context_report.png", "--json",
            "context_report.json"]  # fmt: skip


def main(argv=None):
    command = f"posenc context {NAME} " + " ".join(options())
    return report_snapshot.main(
        argv,
        description=__doc__.split("\n\n")[0],
        page="context_report.md",
        kept=KEPT,
        needs=("torch", "transformers", "tokenizers", "matplotlib"),
        save=save,
        cli=cli(),
        shown=f"{command} \\\n    --plot context_report.png --json context_report.json",
    )


if __name__ == "__main__":
    report_snapshot.use_this_tree()
    sys.exit(main())
