"""Several encodings trained alike and compared: :func:`compare`.

Each encoding is trained with each seed (the same model sizes, data, schedule
and evaluation sets), and evaluated at every length; the result is one table,
encodings x lengths (mean ± standard deviation over the seeds), one figure
(the metric against the length, a line per encoding), and a JSON record of
every figure and setting (:class:`LabComparison`).
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _validate as v
from ..context._common import Plotted, floats
from .data import PUBLISHED, PUBLISHED_SOURCE, load_classification, load_text
from .encodings import Encoding, encoding
from .tasks import TASKS
from .train import (
    CURVE_POINTS,
    SKIP_FACTORS,
    ClassificationProblem,
    LanguageModelProblem,
    RunResult,
    TaskProblem,
    TrainConfig,
    init_distributed,
    run,
    world,
)

__all__ = ["LabComparison", "compare"]

#: The ways the processes of a torchrun launch share a comparison.
PARALLEL = ("data", "grid")


def _mean_std(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation (ddof 1; NaN for one seed) over axis 0."""
    mean = values.mean(axis=0)
    if values.shape[0] < 2:
        return mean, np.full_like(mean, np.nan)
    return mean, values.std(axis=0, ddof=1)


def _cell(mean: float, std: float, metric: str) -> str:
    """``mean ± std``: an accuracy to 3 decimals; a perplexity to 4
    significant digits (its trailing zeros kept: 17.00), the deviation to
    the same decimals as the mean."""
    if not math.isfinite(mean):
        return "—"
    decimals = 3
    if metric == "perplexity" and mean != 0:
        decimals = max(0, 3 - math.floor(math.log10(abs(mean))))
    text = f"{mean:.{decimals}f}"
    return text if not math.isfinite(std) else f"{text} ± {std:.{decimals}f}"


def _thinned(losses: Sequence[float]) -> List[float]:
    if len(losses) <= CURVE_POINTS:
        return [float(x) for x in losses]
    index = np.linspace(0, len(losses) - 1, CURVE_POINTS).round().astype(int)
    return [float(losses[i]) for i in index]


@dataclass(frozen=True, repr=False)
class LabComparison(Plotted):
    """Encodings trained alike and evaluated at each length: :func:`compare`'s result.

    Attributes
    ----------
    task : str
        The task's name, ``"lm"``, or the classification data set's name.
    metric : str
        ``"accuracy"`` (tasks: exact match; classification) or ``"perplexity"``.
    labels : tuple of str
        The encodings' labels, in the order given.
    lengths : tuple of int
        The evaluation lengths.
    seeds : tuple of int
    train_length : int
    values : dict of str to ndarray (seeds, lengths)
        The metric of each seed at each length, per encoding.
    losses : dict of str to ndarray (seeds,)
        The last training step's loss.
    curves : dict of str to list of lists
        Each seed's training loss, thinned to at most ``CURVE_POINTS`` (100) steps.
    skip : dict of str to (dict of int to ndarray (seeds,)) or None, or None
        Language modelling: the skip-position attack's perplexity at the
        training length per factor ``k`` (position ids ``k * i``); None for an
        encoding that takes no position ids (nope, cope).  None where the
        attack was not run (not language modelling, or ``skip=()``).
    published : dict of str to float or None, or None
        Classification: the seed paper's accuracy for each encoding's
        initialisation, where it has one.
    settings : dict
        Every setting, and the versions of posenc, torch, NumPy and Python.
    """

    task: str
    metric: str
    labels: Tuple[str, ...]
    lengths: Tuple[int, ...]
    seeds: Tuple[int, ...]
    train_length: int
    values: Dict[str, np.ndarray]
    losses: Dict[str, np.ndarray]
    curves: Dict[str, List[List[float]]] = field(default_factory=dict)
    skip: Optional[Dict[str, Optional[Dict[int, np.ndarray]]]] = None
    published: Optional[Dict[str, Optional[float]]] = None
    settings: Dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"LabComparison({self.task}: {', '.join(self.labels)}; {self.metric} at lengths "
            f"{list(self.lengths)}, {len(self.seeds)} seed(s))"
        )

    def mean(self, label: str) -> np.ndarray:
        """The mean over the seeds at each length."""
        return _mean_std(self.values[label])[0]

    def std(self, label: str) -> np.ndarray:
        """The sample standard deviation over the seeds (NaN for one seed)."""
        return _mean_std(self.values[label])[1]

    def table(self) -> List[Tuple[str, List[str]]]:
        """``(label, [cell per length])``, each cell ``mean ± std``."""
        rows = []
        for label in self.labels:
            mean, std = _mean_std(self.values[label])
            rows.append((label, [_cell(m, s, self.metric) for m, s in zip(mean, std)]))
        return rows

    def to_markdown(self) -> str:
        """The table, encodings x lengths, and the skip-position attack's."""
        what = {
            "perplexity": "perplexity (non-overlapping windows of each length)",
            "accuracy": "exact-match accuracy",
        }[self.metric]
        if self.published is not None:
            what = "test accuracy"
        n = len(self.seeds)
        spread = "mean ± standard deviation over " if n > 1 else ""
        lines = [
            f"{self.task}: {what}, {spread}{n} seed{'s' if n > 1 else ''}; "
            f"trained at length {self.train_length}:",
            "",
        ]
        if self.published is not None:
            lines += ["| encoding | accuracy | published |", "|---|---:|---:|"]
            for label, cells in self.table():
                paper = self.published.get(label)
                shown = "—" if paper is None else f"{paper:.3f}"
                lines.append(f"| {label} | {cells[0]} | {shown} |")
            source = self.settings.get("published_source")
            if source:
                lines += ["", f"Published: {source}."]
        else:
            lines += [
                "| encoding | " + " | ".join(str(n) for n in self.lengths) + " |",
                "|---|" + "---:|" * len(self.lengths),
            ]
            lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in self.table()]
        if self.skip is not None:
            ks = sorted({k for r in self.skip.values() if r for k in r})
            lines += [
                "",
                f"Skip-position attack (perplexity at length {self.train_length} with position "
                "ids k·i): an absolute encoding meets positions up to "
                f"{self.train_length - 1}·k, a relative one every distance multiplied by k:",
                "",
                "| encoding | " + " | ".join(f"k={k}" for k in ks) + " |",
                "|---|" + "---:|" * len(ks),
            ]
            for label in self.labels:
                r = self.skip.get(label)
                if r is None:
                    lines.append(f"| {label} | " + " | ".join(["n/a"] * len(ks)) + " |")
                    continue
                cells = []
                for k in ks:
                    m, s = _mean_std(np.asarray(r[k])[:, None])
                    cells.append(_cell(float(m[0]), float(s[0]), "perplexity"))
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
            missing = [label for label in self.labels if self.skip.get(label) is None]
            if missing:
                lines += [
                    "",
                    f"n/a: {', '.join(missing)} take{'s' if len(missing) == 1 else ''} no position "
                    "ids (NoPE has none, CoPE counts its own from the attention gates): the "
                    "attack does not apply.",
                ]
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Every figure and setting as plain values (``json.dumps`` takes them)."""
        out: Dict[str, Any] = {
            "task": self.task,
            "metric": self.metric,
            "labels": list(self.labels),
            "lengths": list(self.lengths),
            "seeds": list(self.seeds),
            "train_length": self.train_length,
            "values": {k: [floats(row) for row in a] for k, a in self.values.items()},
            "mean": {k: floats(self.mean(k)) for k in self.labels},
            "std": {k: floats(self.std(k)) for k in self.labels},
            "final_loss": {k: floats(a) for k, a in self.losses.items()},
            "loss_curves": self.curves,
            "skip": None,
            "published": self.published,
            "settings": self.settings,
        }
        if self.skip is not None:
            out["skip"] = {
                label: None if r is None else {str(k): floats(a) for k, a in r.items()}
                for label, r in self.skip.items()
            }
        return out

    def _draw(self, fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        if self.published is not None or len(self.lengths) == 1:
            x = np.arange(len(self.labels))
            means = [float(self.mean(label)[0]) for label in self.labels]
            stds = [float(np.nan_to_num(self.std(label)[0])) for label in self.labels]
            ax.bar(x, means, yerr=stds, color=[f"C{i % 10}" for i in x], alpha=0.8, capsize=3)
            if self.published is not None:
                paper = [self.published.get(label) for label in self.labels]
                shown = [(i, p) for i, p in enumerate(paper) if p is not None]
                if shown:
                    ax.scatter(*zip(*shown), marker="_", s=400, color="k", label="published")
                    ax.legend(fontsize=8)
            ax.set_xticks(x, self.labels, rotation=30, ha="right", fontsize=8)
            ax.set_ylabel(self.metric)
            ax.set_title(f"{self.task} (length {self.lengths[0]})", fontsize=10)
            return
        for i, label in enumerate(self.labels):
            mean, std = _mean_std(self.values[label])
            color = f"C{i % 10}"
            ax.plot(self.lengths, mean, marker="o", ms=3, color=color, label=label)
            if np.isfinite(std).any():
                ax.fill_between(self.lengths, mean - std, mean + std, color=color, alpha=0.15)
        ax.axvline(self.train_length, color="grey", linestyle="--", lw=0.8)
        if self.lengths[-1] >= 4 * self.lengths[0]:
            ax.set_xscale("log", base=2)
        if self.metric == "perplexity":
            ax.set_yscale("log")
        ax.set_xlabel("sequence length (dashed: the training length)")
        ax.set_ylabel("exact-match accuracy" if self.metric == "accuracy" else "perplexity")
        ax.set_title(self.task, fontsize=10)
        ax.legend(fontsize=7)


def _seeds(seeds: Any) -> Tuple[int, ...]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        n = v.integer(seeds, "seeds", minimum=1)
        return tuple(range(n))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds must be a count or a sequence of seeds, not {seeds!r}")
    out = tuple(v.integer(s, "seeds", minimum=0) for s in seeds)
    if not out:
        raise ValueError("seeds must hold at least one seed")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct, got {list(out)}")
    return out


def _lengths(lengths: Any) -> Tuple[int, ...]:
    if isinstance(lengths, (int, np.integer)) and not isinstance(lengths, bool):
        lengths = [lengths]
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"eval_lengths must be a length or a sequence of lengths, not {lengths!r}")
    out = [v.integer(n, "eval_lengths", minimum=1) for n in lengths]
    if not out:
        raise ValueError("eval_lengths must hold at least one length")
    if len(set(out)) != len(out):
        raise ValueError(f"eval_lengths must be distinct, got {out}")
    return tuple(sorted(out))


def _encodings(encodings: Any) -> List[Encoding]:
    if isinstance(encodings, (str, dict, Encoding)):
        encodings = [encodings]
    if not hasattr(encodings, "__iter__"):
        raise TypeError(f"encodings must be a sequence of encodings, not {encodings!r}")
    out = [encoding(e) for e in encodings]
    if not out:
        raise ValueError("encodings must name at least one encoding")
    labels = [e.label for e in out]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"encodings: {', '.join(twice)} given twice (give each a label)")
    return out


def _problem(
    task: Any, text: Any, tokenizer: str, dataset: Any, train_length: Optional[int]
) -> Tuple[Any, str]:
    """The problem and its name."""
    if task is None:
        if text is not None and dataset is not None:
            raise ValueError(
                "give text= (language modelling) or dataset= (classification), not both"
            )
        task = "lm" if text is not None else "classification" if dataset is not None else None
    if task is None:
        raise ValueError(
            "nothing to train on: give task= (a task of posenc.lab.tasks, 'lm' with text=, or "
            "'classification' with dataset=)"
        )
    if task == "lm":
        if text is None:
            raise ValueError(
                "task 'lm' needs text= (a file, a folder, 'datasets:NAME' or TextData)"
            )
        if dataset is not None:
            raise ValueError("dataset= is for task 'classification'")
        if isinstance(text, str) or hasattr(text, "__fspath__"):
            text = load_text(text, tokenizer=tokenizer)
        if train_length is None:
            raise ValueError("task 'lm' needs train_length")
        return LanguageModelProblem(text, train_length), "lm"
    if text is not None:
        raise ValueError(f"text= is for task 'lm', not {task!r}")
    if task == "classification":
        if dataset is None:
            raise ValueError(
                "task 'classification' needs dataset= (sst2, trec, subj, cr, mr, mpqa, a .csv "
                "or .jsonl file, or ClassificationData)"
            )
        if isinstance(dataset, str) or hasattr(dataset, "__fspath__"):
            if train_length is None:
                dataset = load_classification(dataset)
            else:
                dataset = load_classification(dataset, max_len=train_length)
        classification = ClassificationProblem(dataset)
        return classification, classification.name
    if dataset is not None:
        raise ValueError(f"dataset= is for task 'classification', not {task!r}")
    if isinstance(task, str):
        if task not in TASKS:
            raise ValueError(
                f"task {task!r} is none of {', '.join(sorted(TASKS))}, 'lm' or 'classification'"
            )
        task = TASKS[task]()
    if train_length is None:
        raise ValueError("a task needs train_length")
    made = TaskProblem(task, train_length)
    return made, made.name


#: The seed paper's embeddings (:data:`posenc.lab.data.PUBLISHED`'s columns)
#: by a learned table's initialisation: its own two, and the Hub names of the
#: models whose tables the paper took.
PAPER_EMBEDDINGS: Dict[str, str] = {
    "random": "random",
    "sinusoid": "sinusoid",
    "bert-base-uncased": "bert",
    "google-bert/bert-base-uncased": "bert",
    "roberta-base": "roberta",
    "FacebookAI/roberta-base": "roberta",
    "gpt2": "gpt2",
    "openai-community/gpt2": "gpt2",
}


def _published(name: str, encs: List[Encoding]) -> Tuple[Dict[str, Optional[float]], str]:
    """The seed paper's accuracy (a fraction) on data set `name` for each
    encoding, where it has one: a learned table by its initialisation
    (:data:`PAPER_EMBEDDINGS`), from :data:`posenc.lab.data.PUBLISHED`
    (percent); and the table's source."""
    row = PUBLISHED.get(name, {})
    out: Dict[str, Optional[float]] = {}
    for e in encs:
        init = e.option("init", "random") if e.name == "learned" else None
        column = PAPER_EMBEDDINGS.get(init) if isinstance(init, str) else None
        value = row.get(column) if column is not None else None
        out[e.label] = None if value is None else float(value) / 100.0
    return out, PUBLISHED_SOURCE


def _versions() -> Dict[str, Any]:
    import torch

    from .._version import __version__

    return {
        "posenc": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def compare(
    encodings: Any,
    task: Any = None,
    *,
    train_length: Optional[int] = None,
    eval_lengths: Any = None,
    seeds: Any = 3,
    steps: int = 1000,
    batch_size: int = 32,
    lr: float = 1e-3,
    text: Any = None,
    tokenizer: str = "bytes",
    dataset: Any = None,
    dim: int = 32,
    layers: Optional[int] = None,
    heads: int = 4,
    ffn: Optional[int] = None,
    dropout: float = 0.0,
    pooling: str = "mean",
    config: Optional[TrainConfig] = None,
    skip: Sequence[int] = SKIP_FACTORS,
    device: str = "cpu",
    autocast: Optional[str] = None,
    checkpoint_dir: Optional[str] = None,
    parallel: str = "data",
    progress: bool = False,
) -> LabComparison:
    """Train each encoding with each seed alike, and evaluate each at every length.

    Parameters
    ----------
    encodings : sequence of str, dict or Encoding
        The encodings (:func:`posenc.lab.encoding`: ``"rope"``, ``"rope:yarn:4"``,
        ``"alibi+randomized"``, ``{"name": "learned", "init": "gpt2"}``, ...).
    task : str or Task, optional
        A task of :data:`posenc.lab.tasks.TASKS` (``"copy"``, ``"reverse"``,
        ...) or an instance; ``"lm"`` (with `text`); ``"classification"``
        (with `dataset`).  Implied by `text` or `dataset` alone.
    train_length : int
        The length of the training sequences (classification: the length the
        texts are padded or cut to; the data's own by default).
    eval_lengths : int or sequence of int
        The lengths evaluated (the training length by default; classification:
        the texts' length).
    seeds : int or sequence of int
        A count (seeds ``0 .. n-1``) or the seeds.
    steps, batch_size, lr
        The training (:class:`~posenc.lab.train.TrainConfig`'s; `config`, when
        given, holds them all).
    text : str, path or TextData
        Language modelling: ``posenc.lab.data.load_text``'s source (a file, a
        folder, ``"datasets:NAME[:config[:split]]"``), read with `tokenizer`.
    dataset : str, path or ClassificationData
        Classification: ``posenc.lab.data.load_classification``'s source.
    dim, layers, heads, ffn, dropout, pooling
        The model (:class:`~posenc.lab.model.LabModel`); `layers` is 2, and 1
        for classification (the seed paper's encoder).
    skip : sequence of int
        Language modelling: the skip-position attack's factors (``()``: none).
    device, autocast
        As :class:`~posenc.lab.train.TrainConfig` takes them.
    checkpoint_dir : str, optional
        A checkpoint per run there; a comparison run again with it resumes
        each run where it stopped (a finished run is only evaluated).
    parallel : {"data", "grid"}
        Under ``torchrun``: ``"data"`` trains each run data-parallel over all
        the processes (DDP); ``"grid"`` deals the runs (encoding x seed) out to
        the processes, each training its own alone.  Every process returns the
        whole comparison.
    progress : bool
        Progress bars on stderr, when it is a terminal.

    Returns
    -------
    LabComparison
        ``.to_markdown()``, ``.to_dict()``, ``.plot(path)``.

    Examples
    --------
    >>> import posenc.lab
    >>> result = posenc.lab.compare(["nope", "rope", "alibi"], "copy", train_length=32,
    ...                             eval_lengths=[32, 64, 128], seeds=3)  # doctest: +SKIP
    >>> print(result.to_markdown())  # doctest: +SKIP
    """
    encs = _encodings(encodings)
    seed_list = _seeds(seeds)
    parallel = v.choice(parallel, "parallel", PARALLEL)
    problem, name = _problem(task, text, tokenizer, dataset, train_length)
    if isinstance(problem, ClassificationProblem):
        if train_length is not None and train_length != problem.length:
            raise ValueError(
                f"train_length {train_length}: the texts are padded to {problem.length} tokens"
            )
        train_length = problem.length
        lengths: Tuple[int, ...] = (problem.length,)
        if eval_lengths is not None and _lengths(eval_lengths) != lengths:
            raise ValueError(
                f"eval_lengths: a classifier is evaluated at its texts' length {problem.length}"
            )
    else:
        assert train_length is not None
        lengths = _lengths(train_length if eval_lengths is None else eval_lengths)
    if config is None:
        config = TrainConfig(
            steps=steps, batch_size=batch_size, lr=lr, device=device, autocast=autocast
        )
    if layers is None:
        layers = 1 if isinstance(problem, ClassificationProblem) else 2
    options: Dict[str, Any] = {
        "dim": dim,
        "layers": layers,
        "heads": heads,
        "ffn": ffn,
        "dropout": dropout,
    }
    if isinstance(problem, ClassificationProblem):
        options["pooling"] = pooling
    skip = tuple(v.integer(k, "skip", minimum=1) for k in skip)
    init_distributed(config.device)
    rank, size = world()
    grid = [(e, s) for e in encs for s in seed_list]
    done: Dict[Tuple[str, int], RunResult] = {}
    split = parallel == "grid" and size > 1
    mine = grid[rank::size] if split else grid
    for e, s in mine:
        done[(e.label, s)] = run(
            e,
            problem,
            seed=s,
            train_length=train_length,
            eval_lengths=lengths,
            config=config,
            model_options=options,
            checkpoint_dir=checkpoint_dir,
            skip=skip if isinstance(problem, LanguageModelProblem) else (),
            data_parallel=not split,
            progress=progress,
        )
    if split:
        import torch

        gathered: List[Any] = [None] * size
        torch.distributed.all_gather_object(gathered, done)
        for part in gathered:
            done.update(part)
    return _assemble(encs, seed_list, lengths, train_length, name, problem, done, config,
                     options, parallel, size, skip)  # fmt: skip


def _assemble(
    encs: List[Encoding],
    seed_list: Tuple[int, ...],
    lengths: Tuple[int, ...],
    train_length: int,
    name: str,
    problem: Any,
    done: Dict[Tuple[str, int], RunResult],
    config: TrainConfig,
    options: Dict[str, Any],
    parallel: str,
    size: int,
    skip_factors: Tuple[int, ...] = (),
) -> LabComparison:
    labels = tuple(e.label for e in encs)
    values = {
        e.label: np.array([done[(e.label, s)].values for s in seed_list], dtype=np.float64)
        for e in encs
    }
    losses = {e.label: np.array([done[(e.label, s)].losses[-1] for s in seed_list]) for e in encs}
    curves = {e.label: [_thinned(done[(e.label, s)].losses) for s in seed_list] for e in encs}
    skip: Optional[Dict[str, Optional[Dict[int, np.ndarray]]]] = None
    if isinstance(problem, LanguageModelProblem) and skip_factors:
        skip = {}
        for e in encs:
            first = done[(e.label, seed_list[0])].skip
            if first is None:
                skip[e.label] = None
                continue
            skip[e.label] = {
                k: np.array([done[(e.label, s)].skip[k] for s in seed_list])  # type: ignore[index]
                for k in first
            }
    published = None
    settings: Dict[str, Any] = {
        "task": problem.describe(),
        "encodings": [e.to_dict() for e in encs],
        "seeds": list(seed_list),
        "train_length": train_length,
        "eval_lengths": list(lengths),
        "model": dict(options),
        "train": config.to_dict(),
        "parallel": parallel,
        "world_size": size,
        "versions": _versions(),
    }
    if isinstance(problem, LanguageModelProblem):
        settings["skip"] = list(skip_factors)
    if isinstance(problem, ClassificationProblem):
        published, source = _published(problem.name, encs)
        settings["published_source"] = source
    return LabComparison(
        task=name,
        metric=problem.metric,
        labels=labels,
        lengths=lengths,
        seeds=seed_list,
        train_length=train_length,
        values=values,
        losses=losses,
        curves=curves,
        skip=skip,
        published=published,
        settings=settings,
    )
