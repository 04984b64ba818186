"""Two published results on position encodings, reproduced at small scale by
``posenc.lab`` on the CPU.

1. ``alibi_lm``: Press et al. 2022 ("Train Short, Test Long"): trained at
   one length, ALiBi's perplexity stays near its training-length value at
   longer ones, where the sinusoid's climbs.  A byte-level language model
   on the Python documentation's reStructuredText sources (Debian's
   ``python3.11-doc`` package: ``/usr/share/doc/python3.11/html/_sources``),
   with ALiBi, the sinusoid, RoPE and NoPE, evaluated at 1x to 8x its
   training length.
2. ``selective_copy``: Golovneva et al. 2024 (CoPE): on selective copy, CoPE
   keeps its accuracy where the data tokens stand further apart than in
   training, where RoPE fails.  The lab's selective copy with a fixed number
   of data tokens: a longer sequence is a sparser one, with longer stretches
   of blanks between them.

Each experiment is one call of :func:`posenc.lab.compare` with the settings
of :data:`EXPERIMENTS` (fixed seeds; deterministic on the CPU), on one
thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``).  For each it
writes to ``--out``: ``NAME.json`` (``LabComparison.to_dict()`` and, under
``"benchmark"``, the wall time, the CPU, the data's held-out files),
``NAME.md`` (the table, the settings and the wall time, as the guide shows
them) and ``NAME.png`` (``LabComparison.plot``)::

    python benchmarks/lab_results.py --out DIR            # both, about half an hour
    python benchmarks/lab_results.py --out DIR --only selective_copy
    python benchmarks/lab_results.py --out DIR --quick    # a minute: the script works
    python benchmarks/lab_results.py --out DIR --snapshot # and keep them for the docs
    python benchmarks/lab_results.py --out DIR --from-json  # NAME.md, NAME.png from NAME.json

``--snapshot`` copies what is made into ``docs/reports/lab_results/``, from
which ``docs/make_lab_results.py`` puts them where the guide
(docs/guide/lab.md, "Published results, reproduced") reads them: a docs
build never trains.  It needs torch and matplotlib.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: where --snapshot keeps the results for the docs (docs/make_lab_results.py)
KEPT = ROOT / "docs" / "reports" / "lab_results"

#: The text of the language model (Debian's python3.11-doc).
TEXT = "/usr/share/doc/python3.11/html/_sources"
TEXT_PATTERN = "*.txt"
#: The share of the text's bytes that trains; the rest is held out.
TEXT_SPLIT = 0.9

#: The experiments: compare()'s arguments (model, training, lengths, seeds)
#: and each one's title.  Sized for a shared core of a 2-core machine: the
#: language model took 9 minutes there, selective copy 19.
EXPERIMENTS = {
    "alibi_lm": {
        "title": "Press et al. 2022: perplexity beyond the training length",
        "encodings": ["alibi", "sinusoid", "rope", "nope"],
        "task": "lm",
        "train_length": 64,
        "eval_lengths": [64, 128, 256, 512],
        "seeds": [0, 1],
        "model": {"dim": 64, "layers": 2, "heads": 4},
        "train": {"steps": 1000, "batch_size": 32, "lr": 2e-3, "eval_tokens": 65536},
    },
    "selective_copy": {
        "title": "Golovneva et al. 2024: selective copy, sparser than in training",
        "encodings": ["cope", "rope", "alibi", "sinusoid", "nope"],
        "task": "selective_copy",
        "task_options": {"n_symbols": 16, "n_tokens": 6},
        "train_length": 32,
        "eval_lengths": [32, 64, 128, 256],
        "seeds": [0, 1, 2],
        "model": {"dim": 64, "layers": 2, "heads": 4},
        "train": {"steps": 1500, "batch_size": 32, "lr": 1e-3, "eval_samples": 256},
    },
}

#: --quick: the same experiments, a few steps and one seed (the script works;
#: the figures mean nothing).
QUICK = {
    "alibi_lm": {
        "eval_lengths": [64, 128],
        "seeds": [0],
        "train": {"steps": 20, "batch_size": 8, "lr": 2e-3, "eval_tokens": 1024},
    },
    "selective_copy": {
        "eval_lengths": [32, 64],
        "seeds": [0],
        "train": {"steps": 20, "batch_size": 8, "lr": 1e-3, "eval_samples": 32},
    },
}


def cpu_model() -> str:
    """The CPU's name as /proc/cpuinfo gives it (else platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def held_out(root: str, pattern: str, split: float, eval_tokens: int) -> dict:
    """Where ``posenc.lab.data.load_text(root, pattern=pattern, split=split)``
    cuts the text, in its files: the files read (sorted, as load_text reads
    them), the file where the validation part starts and the byte there, the
    files after it, and the files the first `eval_tokens` validation bytes
    (the evaluated ones) lie in."""
    base = Path(root)
    files = sorted(
        p
        for p in base.rglob(pattern)
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(base).parts)
    )
    spans, offset, previous = [], 0, None
    for path in files:
        data = path.read_bytes()
        if previous is not None and not previous.endswith(b"\n"):
            offset += 1  # the newline load_text puts between two files
        spans.append((str(path.relative_to(base)), offset, offset + len(data)))
        offset += len(data)
        previous = data
    cut = int(round(offset * split))
    valid = [(name, a, b) for name, a, b in spans if b > cut]
    evaluated = [name for name, a, b in valid if a < cut + eval_tokens]
    first, start, _ = valid[0]
    return {
        "files": len(spans),
        "bytes": offset,
        "train_bytes": cut,
        "valid_bytes": offset - cut,
        "valid_starts_in": first,
        "valid_starts_at_byte": cut - start,
        "valid_files": [name for name, _, _ in valid],
        "evaluated_files": evaluated,
    }


def _merged(name: str, quick: bool) -> dict:
    exp = {k: (dict(v) if isinstance(v, dict) else v) for k, v in EXPERIMENTS[name].items()}
    if quick:
        exp.update(QUICK[name])
    return exp


def run(name: str, out: Path, *, quick: bool, text: str) -> dict:
    """One experiment: compare(), then NAME.json, NAME.md and NAME.png in `out`."""
    import torch

    import posenc.lab
    from posenc.lab.data import load_text
    from posenc.lab.tasks import TASKS
    from posenc.lab.train import TrainConfig

    torch.set_num_threads(1)
    exp = _merged(name, quick)
    extra = {}
    if exp["task"] == "lm":
        if not Path(text).is_dir():
            raise SystemExit(
                f"{name}: no text at {text} (Debian: apt-get install python3.11-doc; or --text)"
            )
        task, source = "lm", load_text(text, pattern=TEXT_PATTERN, split=TEXT_SPLIT)
        where = held_out(text, TEXT_PATTERN, TEXT_SPLIT, exp["train"]["eval_tokens"])
        if (where["train_bytes"], where["valid_bytes"]) != (len(source.train), len(source.valid)):
            raise RuntimeError(f"held_out() does not cut {text} where load_text does")
        extra["text"] = {
            "source": text,
            "package": "python3.11-doc (Debian)",
            "pattern": TEXT_PATTERN,
            "split": TEXT_SPLIT,
            **where,
        }
    else:
        task, source = TASKS[exp["task"]](**exp.get("task_options", {})), None
    load = os.getloadavg()
    started = time.perf_counter()
    result = posenc.lab.compare(
        exp["encodings"],
        task,
        text=source,
        train_length=exp["train_length"],
        eval_lengths=exp["eval_lengths"],
        seeds=exp["seeds"],
        config=TrainConfig(**exp["train"]),
        **exp["model"],
    )
    wall = time.perf_counter() - started
    record = result.to_dict()
    record["benchmark"] = {
        "experiment": name,
        "title": exp["title"],
        "quick": quick,
        "wall_seconds": wall,
        "cpu": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "load_average_before": list(load),
        "load_average_after": list(os.getloadavg()),
        "task_options": exp.get("task_options", {}),
        "command": "python benchmarks/lab_results.py" + (" --quick" if quick else ""),
        **extra,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(page(result, record), encoding="utf-8")
    result.plot(out / f"{name}.png")
    return record


def from_record(record: dict):
    """The :class:`posenc.lab.LabComparison` a ``NAME.json`` holds (its
    figures read back exactly: JSON keeps a float's every bit)."""
    import numpy as np

    from posenc.lab import LabComparison

    skip = record["skip"]
    if skip is not None:
        skip = {
            label: None if r is None else {int(k): np.asarray(v) for k, v in r.items()}
            for label, r in skip.items()
        }
    return LabComparison(
        task=record["task"],
        metric=record["metric"],
        labels=tuple(record["labels"]),
        lengths=tuple(record["lengths"]),
        seeds=tuple(record["seeds"]),
        train_length=record["train_length"],
        values={k: np.asarray(v, dtype=np.float64) for k, v in record["values"].items()},
        losses={k: np.asarray(v) for k, v in record["final_loss"].items()},
        curves=record["loss_curves"],
        skip=skip,
        published=record["published"],
        settings=record["settings"],
    )


def remake(name: str, out: Path) -> dict:
    """NAME.md and NAME.png again from NAME.json in `out`, nothing trained."""
    record = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    result = from_record(record)
    (out / f"{name}.md").write_text(page(result, record), encoding="utf-8")
    result.plot(out / f"{name}.png")
    return record


def page(result, record: dict) -> str:
    """The table, the exact settings and the wall time, as Markdown."""
    b = record["benchmark"]
    s = result.settings
    m, t = s["model"], s["train"]
    ffn = m["ffn"] or 4 * m["dim"]
    lines = [result.to_markdown(), "", "Settings:", ""]
    if "text" in b:
        x = b["text"]
        lines.append(
            f"- data: the {x['files']} files `{x['pattern']}` under `{x['source']}` "
            f"(Debian's {x['package'].split()[0]}), sorted by path and read as one byte "
            f"stream of {x['bytes']:,} bytes (vocabulary 256); the first {x['split']:.0%} "
            f"({x['train_bytes']:,} bytes) trains, the rest ({x['valid_bytes']:,} bytes, "
            f"from byte {x['valid_starts_at_byte']:,} of `{x['valid_starts_in']}` through "
            f"`{x['valid_files'][-1]}`) is held out; each length is scored on the first "
            f"{t['eval_tokens']:,} held-out bytes (in "
            + ", ".join(f"`{f}`" for f in x["evaluated_files"])
            + "), the same bytes at every length, in windows side by side"
        )
    else:
        options = ", ".join(f"{k}={v}" for k, v in b["task_options"].items())
        lines.append(
            f"- task: `{s['task']['name']}` ({options}; vocabulary {s['task']['vocab_size']}), "
            f"{t['eval_samples']} evaluation sequences per length and seed"
        )
    lines += [
        f"- model: pre-LN decoder, {m['layers']} layers, width {m['dim']}, {m['heads']} heads, "
        f"FFN {ffn}, dropout {m['dropout']}",
        f"- training: {t['steps']} steps of {t['batch_size']} sequences of {s['train_length']} "
        f"tokens, AdamW (betas {t['betas'][0]}, {t['betas'][1]}; weight decay "
        f"{t['weight_decay']}), peak lr {t['lr']:g}, {t['warmup']} warmup steps then "
        f"{t['schedule']} to {t['min_lr_ratio']:g}x, gradients clipped to {t['grad_clip']:g}",
        f"- lengths: trained at {s['train_length']}, evaluated at "
        + ", ".join(str(n) for n in s["eval_lengths"])
        + f"; seeds {', '.join(str(x) for x in s['seeds'])}",
        f"- wall time: {b['wall_seconds'] / 60:.1f} min for the {len(result.labels)} encodings x "
        f"{len(result.seeds)} seed{'s' if len(result.seeds) > 1 else ''} on one thread of an "
        f"{b['cpu']} (a 2-core machine shared with other work: load average "
        f"{b['load_average_before'][0]:.1f} at the start); "
        f"posenc {s['versions']['posenc']}, torch {s['versions']['torch']}",
    ]
    if b["quick"]:
        lines += ["", "(--quick: a check that the script runs; these figures mean nothing.)"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", required=True, type=Path, help="the folder written to")
    parser.add_argument("--quick", action="store_true", help="a few steps, one seed")
    parser.add_argument(
        "--only", action="append", choices=sorted(EXPERIMENTS), help="this experiment only"
    )
    parser.add_argument("--text", default=TEXT, help=f"the language model's text ({TEXT})")
    parser.add_argument(
        "--from-json",
        action="store_true",
        help="make NAME.md and NAME.png again from --out's NAME.json, training nothing",
    )
    parser.add_argument(
        "--snapshot", action="store_true", help=f"keep what is made in {KEPT.relative_to(ROOT)}"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported and starts threads
    if args.snapshot and args.quick:
        parser.error("--snapshot keeps full runs only, not --quick ones")
    for name in args.only or list(EXPERIMENTS):
        if args.from_json:
            record = remake(name, args.out)
            if args.snapshot and record["benchmark"]["quick"]:
                parser.error(f"--snapshot: {name}.json is of a --quick run")
        else:
            record = run(name, args.out, quick=args.quick, text=args.text)
        print((args.out / f"{name}.md").read_text(encoding="utf-8"), flush=True)
        if args.snapshot:
            KEPT.mkdir(parents=True, exist_ok=True)
            for ext in ("json", "md", "png"):
                shutil.copyfile(args.out / f"{name}.{ext}", KEPT / f"{name}.{ext}")
        del record
    return 0


if __name__ == "__main__":
    if list((ROOT / "posenc").glob("_core*.so")) + list((ROOT / "posenc").glob("_core*.pyd")):
        sys.path.insert(0, str(ROOT))  # this tree's posenc, built in place
    sys.exit(main())
