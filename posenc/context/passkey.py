"""Passkey retrieval (Mohtashami & Jaggi 2023), as the YaRN authors run it.

A number, the pass key, is hidden in filler text that says nothing; the
model is asked for it at the end, and its greedy continuation is read: the
trial is right when the first run of digits in it is the key.  The prompt
(:class:`PasskeyPrompt`, every part overridable) is that of Landmark
Attention's test, which YaRN's evaluation reuses::

    There is an important info hidden inside a lot of irrelevant text. Find it
    and memorize them. I will quiz you about the important information there.
    The grass is green. The sky is blue. The sun is yellow. Here we go. There and
    back again. The grass is green. ...          <- the filler, repeated
    The pass key is 12345. Remember it. 12345 is the pass key.
    The grass is green. ...                      <- more filler
    What is the pass key? The pass key is

(the five parts on lines of their own).  At each length ``L`` and depth
``d`` the filler is repeated as many times as fit ``L`` tokens with the
longest key, ``round(d * n)`` of its ``n`` repetitions before the key: depth
0 puts the key first, depth 1 last.  The keys are drawn uniformly from
``1 .. 50000`` (the original's range), per length and depth from
``numpy.random.default_rng([seed, L, round(d * 10**6)])``, so that every
method of a comparison answers the same prompts.  The continuation is
``max_new_tokens`` tokens (10, the original's) of greedy decoding: at each
step the argmax of the logits, with the model's KV cache, no sampling and
no logits processor.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np

from .. import _validate as v
from .._typing import PathLike
from . import _methods
from ._common import (
    Plotted,
    Progress,
    device_of,
    evaluating,
    lengths_of,
    method_label,
    torch_module,
)
from ._methods import NONE

if TYPE_CHECKING:
    pass

_PathT = TypeVar("_PathT", bound=PathLike)

#: The depths at which the key is hidden by default: start, quarters, end.
DEPTHS: Tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
#: The trials at each length and depth by default.
TRIALS = 5
#: The tokens generated for the answer (the original's 10).
NEW_TOKENS = 10

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class PasskeyPrompt:
    """The parts of the passkey prompt, joined by newlines: `task`, the
    filler before the key, `needle` (with its ``{key}`` fields filled), the
    filler after it, `question`.  The defaults are Landmark Attention's
    (the text YaRN's evaluation uses); `keys` is the inclusive range the
    keys are drawn from.
    """

    task: str = (
        "There is an important info hidden inside a lot of irrelevant text. Find it and "
        "memorize them. I will quiz you about the important information there."
    )
    filler: str = (
        "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
    )
    needle: str = "The pass key is {key}. Remember it. {key} is the pass key."
    question: str = "What is the pass key? The pass key is"
    keys: Tuple[int, int] = (1, 50000)

    def __post_init__(self) -> None:
        for name in ("task", "filler", "needle", "question"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"PasskeyPrompt.{name} must be a string")
        if not self.filler.strip():
            raise ValueError("PasskeyPrompt.filler must hold some text")
        if "{key}" not in self.needle:
            raise ValueError("PasskeyPrompt.needle must hold the field {key}")
        try:
            self.needle.format(key=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"PasskeyPrompt.needle: {{key}} must be its only field ({exc!r})"
            ) from exc
        keys = tuple(self.keys)
        if len(keys) != 2:
            raise ValueError(f"PasskeyPrompt.keys must be (lowest, highest), got {self.keys!r}")
        lo = v.integer(keys[0], "PasskeyPrompt.keys", minimum=0)
        hi = v.integer(keys[1], "PasskeyPrompt.keys", minimum=lo)
        object.__setattr__(self, "keys", (lo, hi))

    def text(self, key: int, before: int, after: int) -> str:
        """The prompt with `key` after `before` repetitions of the filler and
        before `after` more."""
        return "\n".join(
            (
                self.task,
                " ".join([self.filler] * before),
                self.needle.format(key=key),
                " ".join([self.filler] * after),
                self.question,
            )
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "task": self.task,
            "filler": self.filler,
            "needle": self.needle,
            "question": self.question,
            "keys": list(self.keys),
        }


def answer_key(continuation: str) -> Optional[int]:
    """The key a continuation gives: its first run of digits (None without one)."""
    found = _DIGITS.search(continuation)
    return int(found.group()) if found else None


@dataclass(frozen=True, repr=False)
class PasskeyRetrieval(Plotted):
    """Passkey retrieval at each length and depth: the result of
    :func:`passkey_retrieval`.

    Attributes
    ----------
    lengths : tuple of int
        The prompt lengths asked for, in tokens (each prompt has at most as many).
    depths : tuple of float
        Where the key stands in the filler (0: before all of it, 1: after).
    keys : ndarray of shape (n_depths, n_lengths, trials)
        The keys hidden.
    answers : ndarray of shape (n_depths, n_lengths, trials), dtype object
        The decoded continuation of each trial.
    correct : ndarray of bool, same shape
        Whether its first number is the key.
    prompt_tokens : ndarray of int, same shape
        The tokens of each prompt.
    method : str
        The scaling method the model ran with (``"none"``: as loaded).
    prompt : PasskeyPrompt
        The prompt's parts.
    accuracy : ndarray of shape (n_depths, n_lengths)
        The share of trials right at each depth and length.
    """

    lengths: Tuple[int, ...]
    depths: Tuple[float, ...]
    keys: np.ndarray
    answers: np.ndarray
    correct: np.ndarray
    prompt_tokens: np.ndarray
    method: str = NONE
    prompt: PasskeyPrompt = field(default_factory=PasskeyPrompt)
    accuracy: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accuracy", self.correct.mean(axis=-1))

    @property
    def trials(self) -> int:
        """The trials at each length and depth."""
        return int(self.correct.shape[-1])

    def by_length(self) -> np.ndarray:
        """``(n_lengths,)``: the share right at each length, over depths and trials."""
        return self.correct.mean(axis=(0, 2))

    def __repr__(self) -> str:
        cells = ", ".join(f"{n}: {a:.0%}" for n, a in zip(self.lengths, self.by_length()))
        return f"PasskeyRetrieval({self.method!r}, {self.trials} trials; {cells})"

    def to_dict(self) -> Dict[str, Any]:
        """The figures and every trial as plain Python values."""
        return {
            "method": self.method,
            "lengths": list(self.lengths),
            "depths": list(self.depths),
            "trials": self.trials,
            "accuracy": self.accuracy.tolist(),
            "accuracy_by_length": self.by_length().tolist(),
            "keys": self.keys.tolist(),
            "answers": self.answers.tolist(),
            "correct": self.correct.tolist(),
            "prompt_tokens": self.prompt_tokens.tolist(),
            "prompt": self.prompt.to_dict(),
        }

    def to_markdown(self) -> str:
        """A Markdown table: a row per depth, a column per length."""
        head = " | ".join(str(n) for n in self.lengths)
        lines = [
            f"Passkey retrieval ({self.method}, {self.trials} trials per cell):",
            "",
            f"| depth | {head} |",
            "|---:|" + "---:|" * len(self.lengths),
        ]
        for i, d in enumerate(self.depths):
            cells = " | ".join(f"{a:.0%}" for a in self.accuracy[i])
            lines.append(f"| {d:g} | {cells} |")
        cells = " | ".join(f"{a:.0%}" for a in self.by_length())
        lines.append(f"| all | {cells} |")
        return "\n".join(lines)

    _size = (5.5, 4.2)

    def _draw(self, fig: Any) -> None:
        """The accuracy as a heatmap, depth x length."""
        ax = fig.add_subplot(1, 1, 1)
        image = draw_heatmap(ax, self)
        fig.colorbar(image, ax=ax, shrink=0.85, label="accuracy")


def draw_heatmap(ax: Any, r: PasskeyRetrieval, title: Optional[str] = None) -> Any:
    """The accuracy of `r` on `ax`, depth (rows) x length (columns), each
    cell written; returns the image."""
    image = ax.imshow(r.accuracy, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(r.lengths)), [str(n) for n in r.lengths])
    ax.set_yticks(range(len(r.depths)), [f"{d:g}" for d in r.depths])
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("depth of the key")
    for i in range(len(r.depths)):
        for j in range(len(r.lengths)):
            ax.text(j, i, f"{r.accuracy[i, j]:.0%}", ha="center", va="center", fontsize=7)
    ax.set_title(title or f"passkey retrieval ({r.method})", fontsize=10)
    return image


# ---------------------------------------------------------------- running it


def _depths_of(depths: Any) -> Tuple[float, ...]:
    if isinstance(depths, (str, bytes)) or not hasattr(depths, "__iter__"):
        raise TypeError(f"depths must be a sequence of numbers in [0, 1], not {depths!r}")
    out = tuple(v.real(d, "depths") for d in depths)
    if not out:
        raise ValueError("depths must hold at least one depth")
    if any(not 0.0 <= d <= 1.0 for d in out):
        raise ValueError(f"depths must be in [0, 1], got {list(out)}")
    if len(set(out)) != len(out):
        raise ValueError(f"depths must be distinct, got {list(out)}")
    return out


def _encode(tokenizer: Any, text: str) -> List[int]:
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    return [int(i) for i in ids]


@dataclass(frozen=True)
class _Plan:
    """The prompts of one length and depth: the filler repetitions before
    and after the key, and the keys of its trials."""

    before: int
    after: int
    keys: Tuple[int, ...]


def _fit(tokenizer: Any, prompt: PasskeyPrompt, length: int, depth: float) -> Tuple[int, int]:
    """``(before, after)``: the most filler repetitions that keep the prompt
    with the longest key within `length` tokens, ``round(depth * n)`` before."""

    def size(n: int) -> int:
        before = int(round(depth * n))
        return len(_encode(tokenizer, prompt.text(prompt.keys[1], before, n - before)))

    base = size(0)
    if base > length:
        raise ValueError(
            f"passkey: the prompt without filler takes {base} tokens, more than the length "
            f"{length}; give longer lengths"
        )
    per = max(1.0, (size(8) - base) / 8)
    lo, hi = 0, int((length - base) / per) + 2
    while size(hi) <= length:  # the estimate was short
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # size(lo) <= length < size(hi)
        mid = (lo + hi) // 2
        if size(mid) <= length:
            lo = mid
        else:
            hi = mid
    before = int(round(depth * lo))
    return before, lo - before


def _cache_keyword(model: Any) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache``
    (transformers 5.2x), else ``past_key_values``."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _greedy(model: Any, ids: List[int], steps: int, torch: Any) -> List[int]:
    """`steps` tokens of greedy decoding after `ids`, with the KV cache."""
    device = device_of(model)
    keyword = _cache_keyword(model)
    out: List[int] = []
    with torch.no_grad():
        step = model(input_ids=torch.tensor([ids], device=device), use_cache=True)
        for k in range(steps):
            token = int(step.logits[0, -1].argmax())
            out.append(token)
            if k + 1 < steps:
                cache = getattr(step, "cache", None)
                if cache is None:
                    cache = step.past_key_values
                step = model(
                    input_ids=torch.tensor([[token]], device=device),
                    use_cache=True,
                    **{keyword: cache},
                )
    return out


def plans(
    tokenizer: Any,
    prompt: PasskeyPrompt,
    lengths: Sequence[int],
    depths: Sequence[float],
    trials: int,
    seed: int,
) -> Dict[Tuple[int, int], _Plan]:
    """``{(depth index, length index): plan}``: the prompts of every cell."""
    out = {}
    lo, hi = prompt.keys
    for j, length in enumerate(lengths):
        for i, depth in enumerate(depths):
            before, after = _fit(tokenizer, prompt, length, depth)
            rng = np.random.default_rng([seed, length, int(round(depth * 10**6))])
            keys = tuple(int(k) for k in rng.integers(lo, hi + 1, size=trials))
            out[i, j] = _Plan(before, after, keys)
    return out


def measure(
    model: Any,
    tokenizer: Any,
    prompt: PasskeyPrompt,
    lengths: Tuple[int, ...],
    depths: Tuple[float, ...],
    cells: Dict[Tuple[int, int], _Plan],
    new_tokens: int,
    label: str,
    bar: Progress,
) -> PasskeyRetrieval:
    """Every trial of `cells` run on the model as it is (no method applied here)."""
    torch = torch_module("passkey_retrieval")
    trials = len(next(iter(cells.values())).keys)
    shape = (len(depths), len(lengths), trials)
    keys = np.zeros(shape, dtype=np.int64)
    correct = np.zeros(shape, dtype=bool)
    tokens = np.zeros(shape, dtype=np.int64)
    answers = np.empty(shape, dtype=object)
    with evaluating(model):
        for (i, j), plan in cells.items():
            for t, key in enumerate(plan.keys):
                before, after = plan.before, plan.after
                ids = _encode(tokenizer, prompt.text(key, before, after))
                while len(ids) > lengths[j] and before + after > 0:  # this key is longer
                    before, after = (before - 1, after) if before > after else (before, after - 1)
                    ids = _encode(tokenizer, prompt.text(key, before, after))
                generated = _greedy(model, ids, new_tokens, torch)
                text = tokenizer.decode(generated, skip_special_tokens=True)
                keys[i, j, t], tokens[i, j, t], answers[i, j, t] = key, len(ids), text
                correct[i, j, t] = answer_key(text) == key
                bar.step(f"{label}: passkey at {lengths[j]}")
    return PasskeyRetrieval(
        lengths=lengths,
        depths=depths,
        keys=keys,
        answers=answers,
        correct=correct,
        prompt_tokens=tokens,
        method=label,
        prompt=prompt,
    )


def checked(
    depths: Any, trials: Any, seed: Any, prompt: Any, new_tokens: Any
) -> Tuple[Tuple[float, ...], int, int, PasskeyPrompt, int]:
    """The passkey options checked."""
    if prompt is None:
        prompt = PasskeyPrompt()
    elif not isinstance(prompt, PasskeyPrompt):
        raise TypeError(f"prompt must be a PasskeyPrompt, not {type(prompt).__name__}")
    return (
        _depths_of(depths),
        v.integer(trials, "trials", minimum=1),
        v.integer(seed, "seed", minimum=0),
        prompt,
        v.integer(new_tokens, "max_new_tokens", minimum=1),
    )


def passkey_retrieval(
    model: Any,
    tokenizer: Any,
    lengths: Any,
    *,
    depths: Sequence[float] = DEPTHS,
    trials: int = TRIALS,
    method: Any = NONE,
    prompt: Optional[PasskeyPrompt] = None,
    seed: int = 0,
    max_new_tokens: int = NEW_TOKENS,
    progress: bool = False,
) -> PasskeyRetrieval:
    """Passkey retrieval at each prompt length and depth, over trials.

    Parameters
    ----------
    model : transformers causal LM
        A loaded model, run in eval mode (its flags restored after).
    tokenizer : transformers tokenizer
        The model's: it encodes each prompt (with its special tokens) and
        decodes the continuation.
    lengths : int or sequence of int
        The prompt lengths in tokens (each prompt fills as much of it as
        whole repetitions of the filler allow).
    depths : sequence of float
        Where the key stands, from 0 (before all the filler) to 1 (after it).
    trials : int
        Keys tried at each length and depth.
    method : str, dict or transformers config
        The scaling method the model runs with (``"none"``: as loaded), as
        :func:`perplexity_by_length` takes it.
    prompt : PasskeyPrompt, optional
        The prompt's parts (Landmark Attention's by default).
    seed : int
        The keys' seed (see the module's notes).
    max_new_tokens : int
        The tokens of greedy decoding read for the answer.
    progress : bool
        A progress bar on stderr, when it is a terminal.

    Returns
    -------
    PasskeyRetrieval
    """
    lengths = lengths_of(lengths)
    depths, trials, seed, prompt, max_new_tokens = checked(
        depths, trials, seed, prompt, max_new_tokens
    )
    cells = plans(tokenizer, prompt, lengths, depths, trials, seed)
    bar = Progress(len(cells) * trials, progress)
    try:
        with _methods.with_method(model, _methods.prepared(model, method)) as run:
            return measure(
                run,
                tokenizer,
                prompt,
                lengths,
                depths,
                cells,
                max_new_tokens,
                method_label(method),
                bar,
            )
    finally:
        bar.close()
