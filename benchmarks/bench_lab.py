"""posenc.lab: one training step of its LabModel with each encoding, against
the same model written with x-transformers.

A step is the forward pass, the next-token cross-entropy and the backward
pass (the gradients set to None after it; no optimizer step), on the CPU
in float32, in training mode, dropout 0.  ``posenc`` is
``posenc.lab.LabModel`` with the encoding by name; ``torch`` is
``x_transformers.TransformerWrapper(attn_layers=Decoder(...))`` of the same
shape with x-transformers' own implementation of the encoding:

- ``nope``: no position encoding (``use_abs_pos_emb=False``);
- ``rope``: ``rotary_pos_emb=True, rotary_emb_dim=head_dim`` (its default
  rotates half the head; the lab rotates all of it);
- ``alibi``: ``alibi_pos_bias=True``;
- ``t5``: ``rel_pos_bias=True`` (32 buckets, max distance 128: the lab's);
- ``cope``: ``attn_use_cope=True, attn_cope_max_pos=length + 1`` (the
  lab's number of positions).

Both are pre-LN with the same width, heads, head dim, feed-forward (4 x
dim, GELU, biases), no dropout, a final norm and a linear head, attention
written out (x-transformers' ``attn_flash=False``, which its CoPE needs),
softmax in float32.  What differs is each library's own: x-transformers
projects q, k and v with three matrices (the lab with one), its norms have
no bias, it keeps a copy of the scores for its intermediates, rebuilds the
causal mask in each layer, masks with ``-finfo.max`` (the lab with
``-inf``); its ALiBi bias is made once and cut per layer, its T5 bias made
in each layer (the lab makes T5's once per step: one table for all
layers).

The cases time the two models alternately, step after step, and take each
one's minimum (``noise`` is the median over the minimum, the largest of the
models', what other work on the machine added): on one thread by the
process's CPU time, on more by the wall clock.  ``x-transformers /
posenc`` is the speed-up, at least 1.0 the target.  The lab's ``nope`` step
is timed in the same alternation, so that every encoding's overhead over
NoPE is measured beside it: :func:`tables` prints both.
"""

from __future__ import annotations

import statistics
import time

from common import Case, torch

# (vocab, dim, layers, heads, batch, length); quick: a shorter length
SIZE = (256, 128, 2, 4, 8, 128)
QUICK = (256, 128, 2, 4, 4, 64)

#: the encodings x-transformers implements, and its Decoder's options for each
XT_OPTIONS = {
    "nope": {},
    "rope": {"rotary_pos_emb": True},
    "alibi": {"alibi_pos_bias": True},
    "t5": {"rel_pos_bias": True},
    "cope": {"attn_use_cope": True},
}


def _have_x_transformers():
    try:
        import x_transformers  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the machine
        return False
    return True


def x_transformers_model(name, size):
    """x-transformers' decoder of `size` with its implementation of `name`."""
    from x_transformers import Decoder, TransformerWrapper

    vocab, dim, layers, heads, _, length = size
    options = dict(XT_OPTIONS[name])
    if name == "rope":
        options["rotary_emb_dim"] = dim // heads  # the whole head, as the lab's
    if name == "cope":
        options["attn_cope_max_pos"] = length + 1  # the lab's default
    decoder = Decoder(
        dim=dim, depth=layers, heads=heads, attn_dim_head=dim // heads, ff_mult=4,
        attn_flash=False, **options,
    )  # fmt: skip
    return TransformerWrapper(
        num_tokens=vocab, max_seq_len=length, use_abs_pos_emb=False, attn_layers=decoder
    )


def lab_model(name, size):
    from posenc.lab import LabModel

    vocab, dim, layers, heads, _, length = size
    return LabModel(
        vocab, name, dim=dim, layers=layers, heads=heads, max_positions=length,
        train_length=length,
    )  # fmt: skip


def step_of(model, tokens):
    """One step: forward, the next-token cross-entropy, backward."""
    vocab = None

    def step():
        nonlocal vocab
        logits = model(tokens)
        vocab = logits.shape[-1]
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        for p in model.parameters():
            p.grad = None

    return step


def alternate(fns, repeats, clock=time.perf_counter):
    """Each of `fns` called in turn, `repeats` rounds after two warm-up ones:
    per function the minimum and the median seconds of `clock`."""
    for _ in range(2):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t0 = clock()
            fn()
            out.append(clock() - t0)
    return [(min(t), statistics.median(t)) for t in times]


def lab_cases(quick):
    if torch is None:
        return []
    from posenc.lab import ENCODINGS

    size = QUICK if quick else SIZE
    vocab, dim, layers, heads, batch, length = size
    tokens = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    have_xt = _have_x_transformers()
    cases = []
    for name in ENCODINGS:
        torch.manual_seed(0)
        ours = step_of(lab_model(name, size), tokens)
        nope = step_of(lab_model("nope", size), tokens)
        theirs = None
        if have_xt and name in XT_OPTIONS:
            torch.manual_seed(0)
            theirs = step_of(x_transformers_model(name, size), tokens)

        def timer(repeats, ours=ours, nope=nope, theirs=theirs):
            fns = [ours, nope] + ([theirs] if theirs is not None else [])
            # one thread: the process's CPU time, which the other programs
            # on a shared machine move much less than the wall clock
            cpu = torch.get_num_threads() == 1
            got = alternate(fns, max(repeats, 5), time.process_time if cpu else time.perf_counter)
            row = {"torch_ms": None, "torch_median_ms": None, "clock": "cpu" if cpu else "wall"}
            for key, (low, med) in zip(("posenc", "nope", "torch"), got):
                row[f"{key}_ms"], row[f"{key}_median_ms"] = low * 1e3, med * 1e3
            row["noise"] = max(med / low for low, med in got) - 1.0
            return row

        cases.append(
            Case(
                name=f"lab step {name}, dim {dim}, {layers} layers, {heads} heads, "
                f"batch {batch}, length {length}",
                nbytes=batch * heads * length * length * 4,  # one layer's scores
                posenc=ours,
                torch=theirs,
                compiled=False,
                timer=timer,
                note="torch: x-transformers' Decoder with its own implementation of the encoding",
                extra={"encoding": name, "size": list(size)},
            )
        )
    return cases


def tables(rows):
    """The lab rows as two tables: x-transformers / posenc per encoding it
    has, and each encoding's step over NoPE's (alternated with it)."""
    rows = [r for r in rows if r.get("group") == "lab"]
    if not rows:
        return ""
    out = [
        "lab step (forward + backward): x-transformers / posenc, at least 1.0 the target\n",
        "| encoding | thr | clock | posenc ms | x-transformers ms | x-transformers / posenc "
        "| noise |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("torch_ms") is None:
            continue
        out.append(
            f"| {r['encoding']} | {r['threads']} | {r['clock']} | {r['posenc_ms']:.1f} "
            f"| {r['torch_ms']:.1f} | {r['torch_ms'] / r['posenc_ms']:.2f}x "
            f"| {r['noise'] * 100:.0f}% |"
        )
    out += [
        "",
        "lab step over the lab's NoPE step (timed alternately with it)\n",
        "| encoding | thr | clock | posenc ms | nope ms | over nope | noise |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['encoding']} | {r['threads']} | {r['clock']} | {r['posenc_ms']:.1f} "
            f"| {r['nope_ms']:.1f} | {r['posenc_ms'] / r['nope_ms']:.2f}x "
            f"| {r['noise'] * 100:.0f}% |"
        )
    return "\n".join(out) + "\n"
