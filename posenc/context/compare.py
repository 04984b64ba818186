"""Several scaling methods on one model, in one call: :func:`compare`.

Each method is applied in turn to the same model instance (``"none"``
leaves it as loaded), its measurements run, and the method is removed
before the next: no reload, no copy of the weights.  Every method is
built and checked once (``posenc.hf.prepare``) before anything runs, so
that a method that cannot apply is refused before the first forward pass.  The passkey
prompts and keys are the same for every method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, TypeVar, overload

from .. import _validate as v
from .._typing import PathLike
from ..probe._plots import _figure
from . import _methods
from . import passkey as _passkey
from . import perplexity as _perplexity
from ._common import Progress, lengths_of, max_positions, methods_of
from ._methods import NONE
from .passkey import DEPTHS, NEW_TOKENS, TRIALS, PasskeyPrompt, PasskeyRetrieval
from .perplexity import BINS, PerplexityByLength

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PathT = TypeVar("_PathT", bound=PathLike)


@dataclass(frozen=True, repr=False)
class ContextComparison:
    """Several scaling methods measured on one model: the result of :func:`compare`.

    Attributes
    ----------
    methods : tuple of str
        The methods' labels, in the order they ran.
    lengths : tuple of int
        The context lengths, ascending.
    perplexity : dict of str to PerplexityByLength, or None
        Per method (None without a text).
    passkey : dict of str to PasskeyRetrieval, or None
        Per method (None unless asked for).
    max_position_embeddings : int or None
        The model's own, as loaded (marked on the plots).
    """

    methods: Tuple[str, ...]
    lengths: Tuple[int, ...]
    perplexity: Optional[Dict[str, PerplexityByLength]] = None
    passkey: Optional[Dict[str, PasskeyRetrieval]] = None
    max_position_embeddings: Optional[int] = None

    def __repr__(self) -> str:
        what = [w for w, r in (("perplexity", self.perplexity), ("passkey", self.passkey)) if r]
        return (
            f"ContextComparison({', '.join(self.methods)}; lengths {list(self.lengths)}; "
            f"{' and '.join(what) or 'nothing'} measured)"
        )

    def table(self) -> List[Tuple[str, List[str]]]:
        """The comparison's cells as text: ``(method, [cell per length])``,
        each cell the perplexity, the passkey accuracy in brackets."""
        rows = []
        for m in self.methods:
            cells = []
            for j in range(len(self.lengths)):
                parts = []
                if self.perplexity is not None:
                    parts.append(f"{self.perplexity[m].perplexity[j]:.4g}")
                if self.passkey is not None:
                    acc = f"{self.passkey[m].by_length()[j]:.0%}"
                    parts.append(f"({acc})" if parts else acc)
                cells.append(" ".join(parts))
            rows.append((m, cells))
        return rows

    def to_markdown(self) -> str:
        """One Markdown table, a row per method and a column per length."""
        what = []
        if self.perplexity is not None:
            r = next(iter(self.perplexity.values()))
            what.append(f"sliding-window perplexity ({r.n_tokens} tokens)")
        if self.passkey is not None:
            p = next(iter(self.passkey.values()))
            passkey = f"passkey accuracy over {len(p.depths)} depths x {p.trials} trials"
            what.append(f"({passkey})" if what else passkey)
        lines = [
            "Context length: " + " ".join(what) + ":",
            "",
            "| method | " + " | ".join(str(n) for n in self.lengths) + " |",
            "|---|" + "---:|" * len(self.lengths),
        ]
        lines += [f"| {m} | " + " | ".join(cells) + " |" for m, cells in self.table()]
        if self.max_position_embeddings is not None:
            lines += ["", f"The model's max_position_embeddings: {self.max_position_embeddings}."]
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """The figures as plain Python values (``json.dumps`` takes them)."""
        return {
            "methods": list(self.methods),
            "lengths": list(self.lengths),
            "max_position_embeddings": self.max_position_embeddings,
            "perplexity": (
                None
                if self.perplexity is None
                else {m: r.to_dict() for m, r in self.perplexity.items()}
            ),
            "passkey": (
                None if self.passkey is None else {m: r.to_dict() for m, r in self.passkey.items()}
            ),
        }

    @overload
    def plot(self, path: None = None, *, dpi: float = 110) -> Figure: ...

    @overload
    def plot(self, path: _PathT, *, dpi: float = 110) -> _PathT: ...

    def plot(self, path: Optional[PathLike] = None, *, dpi: float = 110) -> Any:
        """One figure: perplexity against length (a line per method) and the
        loss by position at the longest length (a line per method) above,
        the passkey heatmap (depth x length) of each method below; the
        figure, or written to `path` (as :meth:`posenc.probe.ProbeReport.plot`)."""
        top = self.perplexity is not None
        bottom = self.passkey is not None
        columns = max(2, len(self.methods) if bottom else 2)

        def draw(fig: Any) -> None:
            grid = fig.add_gridspec(int(top) + int(bottom), columns)
            if self.perplexity is not None:
                half = columns // 2
                ax = fig.add_subplot(grid[0, :half])
                _perplexity.draw_perplexity(ax, self.perplexity)
                if self.max_position_embeddings is not None:
                    ax.axvline(self.max_position_embeddings, color="grey", linestyle="--", lw=0.8)
                ax = fig.add_subplot(grid[0, half:])
                longest = self.lengths[-1]
                for i, (m, p) in enumerate(self.perplexity.items()):
                    edges, mean, _ = p.loss_by_position(longest)
                    x = (edges[:-1] + edges[1:] - 1) / 2
                    ax.plot(x, mean, marker=".", color=f"C{i % 10}", label=m)
                if self.max_position_embeddings is not None:
                    ax.axvline(self.max_position_embeddings, color="grey", linestyle="--", lw=0.8)
                ax.set_xlabel(f"position in a window of {longest}")
                ax.set_ylabel("mean loss (nats)")
                ax.set_title("loss by position", fontsize=10)
                ax.legend(fontsize=7)
            if self.passkey is not None:
                row = int(top)
                image = None
                for k, (m, r) in enumerate(self.passkey.items()):
                    ax = fig.add_subplot(grid[row, k])
                    image = _passkey.draw_heatmap(ax, r, title=f"passkey: {m}")
                    if k:
                        ax.set_ylabel("")
                if image is not None:
                    fig.colorbar(image, ax=fig.axes[-1], shrink=0.85, label="accuracy")

        height = 4.2 * (int(top) + int(bottom))
        return _figure(path, dpi, (max(11.0, 3.6 * columns), height), draw)


def compare(
    model: Any,
    tokens: Any = None,
    *,
    methods: Any = (NONE,),
    lengths: Any,
    tokenizer: Any = None,
    passkey: bool = False,
    stride: Optional[int] = None,
    bins: int = BINS,
    max_tokens: Optional[int] = None,
    depths: Sequence[float] = DEPTHS,
    trials: int = TRIALS,
    seed: int = 0,
    prompt: Optional[PasskeyPrompt] = None,
    max_new_tokens: int = NEW_TOKENS,
    progress: bool = False,
) -> ContextComparison:
    """Several scaling methods on one model: perplexity by length, the loss
    by position and passkey retrieval, a method at a time on one instance.

    Parameters
    ----------
    model : transformers causal LM
        A loaded rotary model; each method is applied to it in turn and
        removed (``posenc.hf.patch(model, scaling=...)`` / ``unpatch``).
    tokens : sequence of int, optional
        The text the perplexity is measured on (as
        :func:`~posenc.context.perplexity_by_length`); None: no perplexity.
    methods : sequence or dict
        The scaling methods: ``"none"`` (the model as loaded), short
        strings (``"linear:4"``, ``"yarn:4"``, ``"dynamic:4"``), rope dicts
        or transformers configs; or ``{label: method}``.
    lengths : int or sequence of int
        The context lengths, for both measurements.
    tokenizer : transformers tokenizer, optional
        The model's, for the passkey prompts.
    passkey : bool
        Run passkey retrieval (needs `tokenizer`).
    stride, bins, max_tokens
        As :func:`~posenc.context.perplexity_by_length` takes them.
    depths, trials, seed, prompt, max_new_tokens
        As :func:`~posenc.context.passkey_retrieval` takes them.
    progress : bool
        A progress bar on stderr, when it is a terminal.

    Returns
    -------
    ContextComparison
        With ``.to_markdown()`` (one table, method x length),
        ``.to_dict()`` and ``.plot(path)``.
    """
    chosen = methods_of(methods)
    lengths = lengths_of(lengths)
    passkey = v.flag(passkey, "passkey")
    if tokens is None and not passkey:
        raise ValueError("nothing to measure: give tokens (a text), passkey=True, or both")
    if passkey and tokenizer is None:
        raise ValueError("passkey=True needs the model's tokenizer (tokenizer=)")
    bins = v.integer(bins, "bins", minimum=1)
    ids, strides = None, None
    if tokens is not None:
        strides = _perplexity.checked_strides(stride, lengths)
        ids = _perplexity.prepared_tokens(model, tokens, lengths, max_tokens)
    if passkey:
        checked_depths, trials, seed, prompt, max_new_tokens = _passkey.checked(
            depths, trials, seed, prompt, max_new_tokens
        )
        cells = _passkey.plans(tokenizer, prompt, lengths, checked_depths, trials, seed)
    # each method built and checked once, a bad one refused before anything runs
    ready = {label: _methods.prepared(model, method) for label, method in chosen.items()}
    steps = 0
    if ids is not None and strides is not None:
        steps += _perplexity.window_count(ids.size, lengths, strides)
    if passkey:
        steps += len(cells) * trials
    bar = Progress(steps * len(chosen), progress)
    perplexities: Dict[str, PerplexityByLength] = {}
    passkeys: Dict[str, PasskeyRetrieval] = {}
    try:
        for label in chosen:
            with _methods.with_method(model, ready[label]) as run:
                if ids is not None and strides is not None:
                    perplexities[label] = _perplexity.measure(
                        run, ids, lengths, strides, bins, label, bar
                    )
                if passkey:
                    assert prompt is not None
                    passkeys[label] = _passkey.measure(
                        run,
                        tokenizer,
                        prompt,
                        lengths,
                        checked_depths,
                        cells,
                        max_new_tokens,
                        label,
                        bar,
                    )
    finally:
        bar.close()
    return ContextComparison(
        methods=tuple(chosen),
        lengths=lengths,
        perplexity=perplexities if ids is not None else None,
        passkey=passkeys if passkey else None,
        max_position_embeddings=max_positions(model),
    )
