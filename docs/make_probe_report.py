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
#: the whole command line, run in the output folder
CLI = ["probe", *NAMES, *OPTIONS, "--plot", "probe_report/", "--json", "probe_report.json"]


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
    return report_snapshot.run_cli(folder, CLI)


def main(argv=None):
    command = "posenc probe " + " ".join(NAMES) + " " + " ".join(OPTIONS)
    return report_snapshot.main(
        argv,
        description=__doc__.split("\n\n")[0],
        page="probe_report.md",
        kept=KEPT,
        needs=("torch", "transformers", "tokenizers", "sklearn", "matplotlib"),
        save=save,
        cli=CLI,
        shown=f"{command} --plot probe_report/ --json probe_report.json",
    )


if __name__ == "__main__":
    report_snapshot.use_this_tree()
    sys.exit(main())
