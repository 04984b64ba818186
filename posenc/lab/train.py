"""Training and evaluation of the lab's model: one run is one encoding and one seed.

:func:`run` builds a :class:`~posenc.lab.model.LabModel` under
``torch.manual_seed(seed)``, trains it on batches drawn from a NumPy
``Generator`` seeded by the same seed, and evaluates it at each length:
exact-match accuracy for a task, perplexity for language modelling, accuracy
for classification.

Training (:class:`TrainConfig`): AdamW (betas 0.9 and 0.98, weight decay 0.01
on the matrices, none on biases, norms and vectors), the learning rate
warmed up linearly over the first ``warmup`` steps (a tenth of the steps by
default, at most 1000) and then cosine-decayed to a tenth of its peak
(``schedule="cosine"``, the default) or held (``"constant"``); gradients
clipped to norm 1.

Reproducibility: on the CPU a seed gives the same numbers, run after run.
Checkpoints hold the model, the optimizer, both generators and the step; a
run resumed from one ends with the same numbers as a run never interrupted.

Data parallel: launched by ``torchrun``, the processes of the group train one
model with :class:`torch.nn.parallel.DistributedDataParallel` (gloo on the
CPU, NCCL on GPUs).  Every process draws the same global batch and takes its
own slice; each loss is the sum over its slice divided by the global batch's
count of targets, so the averaged gradient is the one process's gradient of
the same global batch, and 2 processes give the losses of 1 (up to float
rounding).  Evaluation is shared out the same way.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _validate as v
from ..context._common import Progress
from ..probe._optional import require
from .data import lm_batch, lm_windows
from .encodings import Encoding, encoding
from .tasks import IGNORE, exact_match

__all__ = [
    "ClassificationProblem",
    "LanguageModelProblem",
    "RunResult",
    "TaskProblem",
    "TrainConfig",
    "run",
]

#: The skip factors of the skip-position attack (position ids ``k * i``).
SKIP_FACTORS = (1, 2, 4)
#: The points of a training-loss curve a result keeps (every step's loss,
#: thinned evenly to at most this many).
CURVE_POINTS = 100
_SCHEDULES = ("cosine", "constant")
_AUTOCAST = ("bfloat16",)


def _torch() -> Any:
    return require("torch", "posenc.lab", extra="lab")


@dataclass(frozen=True)
class TrainConfig:
    """How a run trains and evaluates.

    Attributes
    ----------
    steps : int
        Optimizer steps.
    batch_size : int
        Sequences per step (the global batch: with several processes, each
        takes ``batch_size / world_size`` of them).
    lr : float
        The peak learning rate.
    schedule : {"cosine", "constant"}
        After the warmup: cosine decay to ``min_lr_ratio * lr`` at the last
        step, or constant.
    warmup : int, optional
        Linear warmup steps; ``min(steps // 10, 1000)`` by default.
    min_lr_ratio : float
        The cosine schedule's last learning rate, as a share of `lr`.
    weight_decay : float
        AdamW's, on the parameters of two or more dimensions.
    betas : (float, float)
        AdamW's.
    grad_clip : float or None
        The gradient norm clipped to; None: no clipping.
    device : str
        The torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...).
    autocast : {"bfloat16"} or None
        Mixed precision: the forward passes under ``torch.autocast`` in
        bfloat16 (the parameters and optimizer stay float32).
    eval_samples : int
        Sequences per evaluation length (tasks).
    eval_tokens : int
        Tokens per evaluation length (language modelling: the first so many
        tokens of the validation text, scored in windows of the length side
        by side; at least the longest length).
    eval_batch_size : int
        Sequences per evaluation forward pass.
    checkpoint_every : int
        With a checkpoint directory: a checkpoint every so many steps (and at
        the end).
    """

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: Optional[int] = None
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: Tuple[float, float] = (0.9, 0.98)
    grad_clip: Optional[float] = 1.0
    device: str = "cpu"
    autocast: Optional[str] = None
    eval_samples: int = 256
    eval_tokens: int = 16384
    eval_batch_size: int = 64
    checkpoint_every: int = 500

    def __post_init__(self) -> None:
        v.integer(self.steps, "steps", minimum=1)
        v.integer(self.batch_size, "batch_size", minimum=1)
        v.real(self.lr, "lr", positive=True)
        v.choice(self.schedule, "schedule", _SCHEDULES)
        if self.warmup is not None:
            v.integer(self.warmup, "warmup", minimum=0)
        ratio = v.real(self.min_lr_ratio, "min_lr_ratio")
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {ratio}")
        if v.real(self.weight_decay, "weight_decay") < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if len(tuple(self.betas)) != 2 or not all(0 <= float(b) < 1 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.grad_clip is not None:
            v.real(self.grad_clip, "grad_clip", positive=True)
        if not isinstance(self.device, str):
            raise TypeError(f"device must be a string such as 'cpu' or 'cuda', not {self.device!r}")
        if self.autocast is not None:
            v.choice(self.autocast, "autocast", _AUTOCAST)
        v.integer(self.eval_samples, "eval_samples", minimum=1)
        v.integer(self.eval_tokens, "eval_tokens", minimum=1)
        v.integer(self.eval_batch_size, "eval_batch_size", minimum=1)
        v.integer(self.checkpoint_every, "checkpoint_every", minimum=1)

    @property
    def warmup_steps(self) -> int:
        return min(self.steps // 10, 1000) if self.warmup is None else self.warmup

    def lr_at(self, step: int) -> float:
        """The learning rate of step `step` (0-based)."""
        warm = self.warmup_steps
        if step < warm:
            return self.lr * (step + 1) / warm
        if self.schedule == "constant":
            return self.lr
        span = max(1, self.steps - warm - 1)
        progress = min(1.0, (step - warm) / span)
        floor = self.min_lr_ratio
        return self.lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["betas"] = list(self.betas)
        out["warmup"] = self.warmup_steps
        return out


# ---------------------------------------------------------------- processes


def world() -> Tuple[int, int]:
    """``(rank, world_size)`` of the torch.distributed group, ``(0, 1)`` without one."""
    torch = _torch()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed(device: str = "cpu") -> Tuple[int, int]:
    """Join the process group ``torchrun`` set up (its environment's
    ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``), once: gloo for the CPU, NCCL
    for CUDA.  ``(rank, world_size)``; ``(0, 1)`` outside torchrun."""
    torch = _torch()
    dist = torch.distributed
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return 0, 1
    if not dist.is_initialized():
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
        # left at exit while the interpreter is whole: a gloo group whose
        # threads outlive it aborts the process as it finalizes
        atexit.register(_leave_group, dist)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return world()


def _leave_group(dist: Any) -> None:
    """The process group init_distributed joined, destroyed (if the caller
    has not already)."""
    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass(frozen=True)
class _Group:
    """The processes that train one model together: this one's rank and their number."""

    rank: int = 0
    size: int = 1

    def sum(self, values: Sequence[float], device: Any) -> List[float]:
        """`values` summed over the group's processes (float64)."""
        if self.size == 1:
            return [float(x) for x in values]
        torch = _torch()
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return [float(x) for x in t.cpu()]


def device_of(name: str) -> Any:
    """`name` as a torch device this machine has (a ValueError saying what it lacks)."""
    _torch()
    from .._torch_args import available_device

    return available_device(name)


# ---------------------------------------------------------------- problems


class _Problem:
    """What a run trains on and how it is scored."""

    name: str = ""
    kind: str = "decoder"  # the model's
    metric: str = "accuracy"
    vocab_size: int = 0
    n_classes: Optional[int] = None
    pad_id: Optional[int] = None

    def batch(self, rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError  # pragma: no cover

    def eval_batches(self, length: int, seed: int, config: TrainConfig) -> List[Any]:
        raise NotImplementedError  # pragma: no cover

    def check_length(self, length: int, what: str) -> None:
        """A ValueError where the problem cannot make sequences of `length`."""

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "metric": self.metric}


class TaskProblem(_Problem):
    """A length-generalization task (``posenc.lab.tasks``): trained at
    `train_length`, scored by exact match at each length (teacher-forced
    argmax at every target position: equal to greedy decoding's exact
    match, since a sequence is right only where every step is)."""

    metric = "accuracy"

    def __init__(self, task: Any, train_length: int) -> None:
        for attr in ("vocab_size", "batch"):
            if not hasattr(task, attr):
                raise TypeError(f"task must be a posenc.lab.tasks Task (it has no {attr})")
        self.task = task
        self.name = str(getattr(task, "name", type(task).__name__))
        self.vocab_size = int(task.vocab_size)
        self.train_length = v.integer(train_length, "train_length", minimum=1)
        self.check_length(self.train_length, "train_length")

    def check_length(self, length: int, what: str) -> None:
        shortest = getattr(self.task, "min_length", None)
        if shortest is not None and length < shortest:
            raise ValueError(f"{what} {length} is below task {self.name!r}'s min_length {shortest}")

    def batch(self, rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
        b = self.task.batch(n, self.train_length, rng)
        return np.asarray(b.tokens, dtype=np.int64), np.asarray(b.targets, dtype=np.int64)

    def eval_batches(self, length: int, seed: int, config: TrainConfig) -> List[Any]:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1, length]))
        b = self.task.batch(config.eval_samples, length, rng)
        return [(np.asarray(b.tokens, np.int64), np.asarray(b.targets, np.int64))]

    def describe(self) -> Dict[str, Any]:
        out = super().describe()
        out["vocab_size"] = self.vocab_size
        return out


class LanguageModelProblem(_Problem):
    """Language modelling on a text: random training windows of
    `train_length` tokens (:func:`posenc.lab.data.lm_batch`); perplexity at
    each length over the first ``eval_tokens`` tokens of the validation text
    (all of it, where shorter) in windows side by side
    (:func:`posenc.lab.data.lm_windows`: every token scored once, the last
    window moved back to end at the end), the same tokens at every length:
    Press et al. 2022's evaluation."""

    metric = "perplexity"

    def __init__(self, text: Any, train_length: int) -> None:
        for attr in ("train", "valid", "vocab_size"):
            if not hasattr(text, attr):
                raise TypeError(
                    f"text must be a posenc.lab.data TextData (train, valid, vocab_size); it has "
                    f"no {attr}"
                )
        self.text = text
        self.train = np.asarray(text.train, dtype=np.int64)
        self.valid = np.asarray(text.valid, dtype=np.int64)
        self.vocab_size = int(text.vocab_size)
        self.name = "lm"
        self.train_length = v.integer(train_length, "train_length", minimum=1)
        if self.train.size < self.train_length + 1:
            raise ValueError(
                f"the training text has {self.train.size} tokens, fewer than train_length + 1 "
                f"({self.train_length + 1})"
            )

    def check_length(self, length: int, what: str) -> None:
        if self.valid.size < length + 1:
            raise ValueError(
                f"{what} {length}: the validation text has {self.valid.size} tokens, fewer than "
                f"{length + 1}; give a longer text or shorter lengths"
            )

    def batch(self, rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
        return lm_batch(self.train, n, self.train_length, rng)

    def eval_batches(self, length: int, seed: int, config: TrainConfig) -> List[Any]:
        stream = self.valid[: config.eval_tokens + 1]
        if stream.size < length + 1:
            raise ValueError(
                f"eval_tokens {config.eval_tokens} is below the evaluation length {length}"
            )
        windows = list(lm_windows(stream, length))
        tokens = np.stack([w[0] for w in windows])
        targets = np.stack([w[1] for w in windows])
        return [(tokens, targets)]

    def describe(self) -> Dict[str, Any]:
        out = super().describe()
        out.update(
            vocab_size=self.vocab_size,
            train_tokens=int(self.train.size),
            valid_tokens=int(self.valid.size),
            tokenizer=getattr(self.text, "tokenizer", None),
            source=getattr(self.text, "source", None),
        )
        return out


class ClassificationProblem(_Problem):
    """Text classification (``posenc.lab.data.load_classification``): an
    encoder trained on batches drawn with replacement from the training
    set, scored by accuracy on the test set."""

    kind = "encoder"
    metric = "accuracy"

    def __init__(self, data: Any) -> None:
        for attr in ("train_x", "train_y", "test_x", "test_y", "n_classes", "vocab_size"):
            if not hasattr(data, attr):
                raise TypeError(
                    f"dataset must be a posenc.lab.data ClassificationData; it has no {attr}"
                )
        self.data = data
        self.train_x = np.asarray(data.train_x, dtype=np.int64)
        self.train_y = np.asarray(data.train_y, dtype=np.int64)
        self.test_x = np.asarray(data.test_x, dtype=np.int64)
        self.test_y = np.asarray(data.test_y, dtype=np.int64)
        self.n_classes = int(data.n_classes)
        self.vocab_size = int(data.vocab_size)
        self.pad_id = getattr(data, "pad_id", None)
        self.name = str(getattr(data, "name", "classification"))
        self.length = int(self.train_x.shape[1])
        if self.test_x.shape[1] != self.length:
            raise ValueError(
                f"the test texts are padded to {self.test_x.shape[1]} tokens, the training "
                f"texts to {self.length}"
            )

    def check_length(self, length: int, what: str) -> None:
        if length != self.length:
            raise ValueError(f"{what} {length}: the texts are padded to {self.length} tokens")

    def batch(self, rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
        index = rng.integers(0, self.train_x.shape[0], size=n)
        return self.train_x[index], self.train_y[index]

    def eval_batches(self, length: int, seed: int, config: TrainConfig) -> List[Any]:
        return [(self.test_x, self.test_y)]

    def describe(self) -> Dict[str, Any]:
        out = super().describe()
        out.update(
            vocab_size=self.vocab_size,
            n_classes=self.n_classes,
            max_len=self.length,
            train=int(self.train_x.shape[0]),
            test=int(self.test_x.shape[0]),
        )
        return out


# ---------------------------------------------------------------- one run


@dataclass
class RunResult:
    """One encoding trained with one seed and evaluated.

    Attributes
    ----------
    label : str
        The encoding's label.
    seed : int
    metric : str
        ``"accuracy"`` or ``"perplexity"``.
    lengths : tuple of int
    values : list of float
        The metric at each length.
    losses : list of float
        The training loss of every step (the global batch's mean).
    skip : dict of int to float, or None
        Language modelling: the perplexity at the training length with
        position ids ``k * i``, per skip factor ``k`` (None where the
        encoding takes no position ids).
    resumed_from : int
        The step the run resumed from (0: trained from the start).
    seconds : float
        The wall time of this call's training.
    """

    label: str
    seed: int
    metric: str
    lengths: Tuple[int, ...]
    values: List[float]
    losses: List[float]
    skip: Optional[Dict[int, float]] = None
    resumed_from: int = 0
    seconds: float = 0.0
    settings: Dict[str, Any] = field(default_factory=dict)


def _file_name(label: str, seed: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_") or "encoding"
    return f"{safe}-seed{seed}.pt"


def max_positions_for(
    enc: Encoding,
    train_length: int,
    eval_lengths: Sequence[int],
    skip: Sequence[int] = (),
) -> int:
    """The position ids + 1 a run reaches: the longest evaluation length, the
    sampler's range, the skip attack's ``(train_length - 1) * k + 1``."""
    longest = max([train_length, *eval_lengths])
    if enc.sampler is not None:
        longest = max(longest, enc.max_len or max(eval_lengths))
    if skip and enc.takes_positions:
        longest = max(longest, (train_length - 1) * max(skip) + 1)
    return longest


def _sampled(
    enc: Encoding, n: int, length: int, limit: int, rng: np.random.Generator
) -> Optional[np.ndarray]:
    """The sampler's position ids for a batch (None without a sampler)."""
    if enc.sampler is None:
        return None
    from .._samplers import pose_position_ids, randomized_position_ids

    if limit < length:
        raise ValueError(
            f"{enc.label!r}: the sampler's range {limit} is shorter than the training length "
            f"{length}"
        )
    draw = randomized_position_ids if enc.sampler == "randomized" else pose_position_ids
    return draw(length, limit, batch=n, seed=rng)


def _param_groups(model: Any, weight_decay: float) -> List[Dict[str, Any]]:
    decay: List[Any] = []
    rest: List[Any] = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else rest).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]


def _loss_sum(torch: Any, logits: Any, targets: Any, kind: str) -> Any:
    f = torch.nn.functional
    if kind == "decoder":
        return f.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE,
            reduction="sum",
        )
    return f.cross_entropy(logits.float(), targets, reduction="sum")


def _count(targets: np.ndarray, kind: str) -> int:
    return int((targets != IGNORE).sum()) if kind == "decoder" else int(targets.shape[0])


def _autocast(torch: Any, device: Any, config: TrainConfig) -> Any:
    return torch.autocast(
        device_type=device.type, dtype=torch.bfloat16, enabled=config.autocast == "bfloat16"
    )


def _slice(rank: int, size: int, n: int) -> slice:
    per = n // size
    return slice(rank * per, (rank + 1) * per)


def _save(path: str, state: Dict[str, Any]) -> None:
    torch = _torch()
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def _checked_state(path: str, settings: Dict[str, Any]) -> Dict[str, Any]:
    torch = _torch()
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != 1:
        raise ValueError(f"{path} is not a checkpoint of posenc.lab")
    theirs = state.get("settings", {})
    if theirs != settings:
        keys = sorted(k for k in set(theirs) | set(settings) if theirs.get(k) != settings.get(k))
        raise ValueError(
            f"{path} was written by a run with other settings ({', '.join(keys)} differ): "
            "give another checkpoint directory, or remove the file to start again"
        )
    return state


def _evaluate(
    torch: Any,
    model: Any,
    problem: _Problem,
    length: int,
    seed: int,
    config: TrainConfig,
    device: Any,
    group: _Group,
    positions: Optional[np.ndarray] = None,
) -> float:
    """The metric at `length` (the group's processes share the sequences out)."""
    rank, size = group.rank, group.size
    total = [0.0, 0.0]  # numerator, denominator
    with torch.no_grad(), _autocast(torch, device, config):
        for tokens, targets in problem.eval_batches(length, seed, config):
            mine = np.arange(tokens.shape[0])[rank::size]
            for start in range(0, mine.size, config.eval_batch_size):
                rows = mine[start : start + config.eval_batch_size]
                x = torch.from_numpy(tokens[rows]).to(device)
                pos = None if positions is None else torch.from_numpy(positions).to(device)
                logits = model(x, pos)
                y = targets[rows]
                if problem.metric == "perplexity":
                    total[0] += float(_loss_sum(torch, logits, torch.from_numpy(y).to(device),
                                                "decoder"))  # fmt: skip
                    total[1] += _count(y, "decoder")
                else:
                    predicted = logits.argmax(-1).cpu().numpy()
                    if problem.kind == "decoder":
                        total[0] += float(exact_match(predicted, y).sum())
                    else:
                        total[0] += float((predicted == y).sum())
                    total[1] += len(rows)
    total = group.sum(total, device)
    if problem.metric == "perplexity":
        return float(math.exp(total[0] / total[1]))
    return total[0] / total[1]


def run(
    spec: Any,
    problem: _Problem,
    *,
    seed: int = 0,
    train_length: int,
    eval_lengths: Sequence[int],
    config: Optional[TrainConfig] = None,
    model_options: Optional[Dict[str, Any]] = None,
    checkpoint_dir: Optional[str] = None,
    stop_after: Optional[int] = None,
    skip: Sequence[int] = (),
    data_parallel: bool = True,
    progress: bool = False,
) -> RunResult:
    """Train encoding `spec` on `problem` with seed `seed`, evaluate it.

    Parameters
    ----------
    spec : str, dict or Encoding
        The encoding (:func:`posenc.lab.encoding`).
    problem : TaskProblem, LanguageModelProblem or ClassificationProblem
    seed : int
        Seeds the model's parameters (``torch.manual_seed``) and the batches
        (``numpy.random.default_rng``); the evaluation sets come from
        ``SeedSequence([seed, 1, length])``, the same for every encoding.
    train_length : int
        The training sequences' length (classification: the texts' padded
        length).
    eval_lengths : sequence of int
        The lengths evaluated.
    config : TrainConfig, optional
    model_options : dict, optional
        :class:`~posenc.lab.model.LabModel`'s sizes (``dim``, ``layers``,
        ``heads``, ``ffn``, ``dropout``, ``pooling``).
    checkpoint_dir : str, optional
        Where the run's checkpoint goes (``<label>-seed<seed>.pt``); a
        checkpoint there of the same settings is resumed (a finished one is
        only evaluated).
    stop_after : int, optional
        Stop after this many steps in all, a checkpoint written (a run split
        over several jobs); the result then holds the losses so far and no
        evaluation.
    skip : sequence of int
        Language modelling: the skip-position attack's factors.
    data_parallel : bool
        Under torchrun, train with DistributedDataParallel over the group
        (False: this process alone, as when the grid is split).
    progress : bool
        A progress bar on stderr when it is a terminal.
    """
    torch = _torch()
    from .model import LabModel

    enc = encoding(spec)
    config = TrainConfig() if config is None else config
    options = dict(model_options or {})
    seed = v.integer(seed, "seed", minimum=0)
    train_length = v.integer(train_length, "train_length", minimum=1)
    lengths = tuple(int(n) for n in eval_lengths)
    problem.check_length(train_length, "train_length")
    for n in lengths:
        problem.check_length(n, "eval length")
    skip = tuple(skip) if problem.metric == "perplexity" and enc.takes_positions else ()
    device = device_of(config.device)
    group = _Group(*world()) if data_parallel else _Group()
    rank, size = group.rank, group.size
    if config.batch_size % size:
        raise ValueError(
            f"batch_size {config.batch_size} does not split into {size} processes' equal slices"
        )
    limit = max_positions_for(enc, train_length, lengths, skip)
    sampler_range = (enc.max_len or max(lengths)) if enc.sampler else None

    torch.manual_seed(seed)
    model = LabModel(
        problem.vocab_size,
        enc,
        kind=problem.kind,
        n_classes=problem.n_classes,
        pad_id=problem.pad_id,
        max_positions=limit,
        train_length=train_length,
        **options,
    ).to(device)
    settings = {
        "model": model.settings(),
        "train": config.to_dict(),
        "problem": problem.describe(),
        "seed": seed,
        "train_length": train_length,
        "world_size": size,
    }
    trained = model
    if size > 1:
        ddp = torch.nn.parallel.DistributedDataParallel
        trained = ddp(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(
        _param_groups(model, config.weight_decay), lr=config.lr, betas=tuple(config.betas)
    )
    rng = np.random.default_rng(seed)
    losses: List[float] = []
    step = 0
    path = None
    if checkpoint_dir is not None:
        os.makedirs(checkpoint_dir, exist_ok=True)
        path = os.path.join(checkpoint_dir, _file_name(enc.label, seed))
        if os.path.exists(path):
            state = _checked_state(path, settings)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            rng.bit_generator.state = state["numpy"]
            torch.set_rng_state(state["torch"])
            step = int(state["step"])
            losses = [float(x) for x in state["losses"]]
    resumed = step
    end = config.steps if stop_after is None else min(config.steps, int(stop_after))

    def checkpoint() -> None:
        if path is not None and rank == 0:
            _save(path, {
                "format": 1, "settings": settings, "step": step,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "numpy": rng.bit_generator.state, "torch": torch.get_rng_state(),
                "losses": losses,
            })  # fmt: skip

    bar = Progress(end - step, progress and rank == 0)
    started = time.perf_counter()
    trained.train()
    part = _slice(rank, size, config.batch_size)
    try:
        while step < end:
            tokens, targets = problem.batch(rng, config.batch_size)
            positions = _sampled(enc, config.batch_size, tokens.shape[1], sampler_range or 0, rng)
            count = _count(targets, problem.kind)
            if count == 0:
                raise ValueError(f"a batch of {problem.name!r} has no targets")
            for params in optimizer.param_groups:
                params["lr"] = config.lr_at(step)
            x = torch.from_numpy(tokens[part]).to(device)
            y = torch.from_numpy(targets[part]).to(device)
            pos = None if positions is None else torch.from_numpy(positions[part]).to(device)
            with _autocast(torch, device, config):
                logits = trained(x, pos)
            loss_sum = _loss_sum(torch, logits, y, problem.kind)
            optimizer.zero_grad(set_to_none=True)
            (loss_sum * (size / count)).backward()
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            mean = group.sum([float(loss_sum.detach())], device)[0] / count
            losses.append(mean)
            bar.step(f"{enc.label} seed {seed}: loss {mean:.4g}")
            if step % config.checkpoint_every == 0 or step == end:
                checkpoint()
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    result = RunResult(
        label=enc.label,
        seed=seed,
        metric=problem.metric,
        lengths=lengths,
        values=[],
        losses=losses,
        resumed_from=resumed,
        seconds=seconds,
        settings=settings,
    )
    if step < config.steps:
        return result
    model.eval()
    result.values = [
        _evaluate(torch, model, problem, n, seed, config, device, group) for n in lengths
    ]
    if skip:
        result.skip = {
            k: _evaluate(
                torch, model, problem, train_length, seed, config, device, group,
                positions=np.arange(train_length, dtype=np.int64) * k,
            )
            for k in skip
        }  # fmt: skip
    return result
