"""A bounded fuzzer of posenc.hf.patch on tiny transformers models.

    python tests/fuzz_api.py --surfaces patch --seconds 60 [--seed 0] [--verbose]

A pool of tiny random-weight models (every kind patch supports: rotary
modules, GPT-J's and GPT-OSS's tables, BLOOM, MPT and Falcon's ALiBi, T5,
MT5, UMT5 and LongT5's bias, DeBERTa-v2 and XLNet; and some it does not:
BERT, GPT-2, ESM's rotary module, LongT5's transient-global attention, a
Llama whose rotary module does not follow its config) is built once, each
model when first drawn.  Every model drawn is a deep copy of its pool
entry, whose own copy is never patched: the witness.  Each round takes one
of a few live models and does one random thing to it:

- ``patch`` (``exact`` drawn), ``unpatch``, a ``patched()`` block;
- a round trip through ``pickle``, ``torch.save`` / ``torch.load`` or
  ``copy.deepcopy`` (the copy carries on in its place);
- a config edit that transformers ignores once a model is built (rope
  theta, T5's buckets, ...);
- ``training`` flags set here and there (each module by itself);
- a second ``patch`` of a patched model, ``patch`` of a submodule;
- ``patch(model, scaling=S)`` or ``prepare(model, scaling=S).apply()`` with
  a context-extension family S (linear, YaRN, llama3): on a rotary model,
  the logits of the same weights in transformers' model whose config
  carries S (built once per model and family: the scaled witness); on a
  model it cannot scale (not rotary, every layer windowed), refused as it
  was.

What must hold: a supported model patched gives the witness's logits
within 1e-5 of their size (the same bits where transformers is exact, and
with ``exact=False`` where posenc reproduces transformers' rounding),
with at most one warning (none with ``exact=False``), the global RNG and
every module's ``training`` flag as they were; a copy gives the same
bits and the same ``patched_parts``; ``unpatch`` gives the witness's bits
and leaves no posenc object in the model; anything refused is refused
with a TypeError or ValueError that leaves the model as it was.  Logits
are computed in eval mode (the flags restored after).

Failures are reported through tests/fuzz_api.py's ``Failures`` (surface
``"patch"``), one line per (model, operation, what happened); the exit
status is 1 if there is any.
"""

from __future__ import annotations

import copy
import functools
import io
import os
import pickle
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz_api  # noqa: E402
import tiny_models  # noqa: E402

VOCAB = 61


class Entry:
    """A pool entry: how to build the model, what patch should do with it."""

    def __init__(self, name, build, *, supported=True, bitwise="never", edits=(), seq2seq=False,
                 max_len=40, family=None, scalable=False):  # fmt: skip
        self.name = name
        self.build = build  # tf -> model
        self.supported = supported
        # where the patched logits are transformers' bits: "always", with
        # exact=False ("exact_false"), or "never" (within 1e-5)
        self.bitwise = bitwise
        self.edits = edits  # config -> None, each ignored by transformers after building
        self.seq2seq = seq2seq
        self.max_len = max_len
        # the name in tiny_models.patch_families of a rotary model whose
        # scaling= has a transformers witness (None: scaling= is refused)
        self.family = family
        self.scalable = scalable or family is not None  # a flat scaling= applies
        self.model = None  # the witness, built when first drawn
        self.scaled = {}  # scaling -> the scaled witness


def _theta(config):
    params = config.rope_parameters
    for p in params.values() if "full_attention" in params else [params]:
        p["rope_theta"] = float(p["rope_theta"]) * 3.0


def _max_positions(config):
    config.max_position_embeddings = 7


def _t5_buckets(config):
    config.relative_attention_num_buckets = 8
    config.relative_attention_max_distance = 9


def _heads(config):
    for key in ("n_head", "n_heads", "num_attention_heads"):
        if hasattr(config, key):
            setattr(config, key, 3)


def _entries(tf):
    families = tiny_models.patch_families(32, VOCAB)

    def of(name):
        config_class, model_class, kwargs = families[name]
        return lambda tf: getattr(tf, model_class)(getattr(tf, config_class)(**kwargs))

    def tampered(tf):  # a rotary module whose numbers do not follow its config
        model = of("llama")(tf)
        model.model.rotary_emb.inv_freq.mul_(1.5)
        model.model.rotary_emb.original_inv_freq.mul_(1.5)
        return model

    def gptj_tampered(tf):  # a sin/cos table that is not GPT-J's formula's
        model = of("gptj")(tf)
        model.transformer.rotary_emb.embed_positions.mul_(1.001)
        return model

    def float64(tf):
        return of("llama")(tf).double()

    rotary_edits = (_theta, _max_positions)
    t5 = dict(bitwise="always", seq2seq=True)
    entries = [
        Entry("llama", of("llama"), edits=rotary_edits, family="llama"),
        Entry(
            "llama_float64", float64, bitwise="exact_false", edits=rotary_edits, family="llama"
        ),  # fmt: skip
        Entry("llama3", of("llama3"), edits=rotary_edits, family="llama3"),
        # within its 16 positions: transformers' dynamic module keeps state grown past them
        Entry("dynamic", of("dynamic"), max_len=16, scalable=True),
        # both its layers windowed: a flat scaling= is refused
        Entry("gemma3", of("gemma3"), edits=rotary_edits),
        Entry("neox", of("neox"), edits=rotary_edits, family="neox"),
        Entry("gptoss", of("gptoss"), edits=(_theta,), scalable=True),
        Entry("gptj", of("gptj"), edits=(_heads,)),
        Entry("codegen", of("codegen")),
        # ALiBi of 6 heads, and of 12 (whose slopes transformers rounds)
        Entry("bloom", of("bloom"), bitwise="always", edits=(_heads,)),
        Entry("bloom12", of("bloom12"), bitwise="exact_false", edits=(_heads,)),
        Entry("mpt12", of("mpt12"), bitwise="exact_false"),
        Entry("falcon", of("falcon"), bitwise="exact_false"),
        Entry("t5", of("t5"), edits=(_t5_buckets,), **t5),
        Entry("umt5", of("umt5"), edits=(_t5_buckets,), **t5),
        Entry("longt5", of("longt5"), **t5),
        Entry("deberta", of("deberta")),
        Entry("xlnet", of("xlnet")),
        # what patch refuses
        Entry("bert", of("bert"), supported=False),
        Entry("gpt2", of("gpt2"), supported=False),
        Entry("esm", of("esm"), supported=False),
        Entry("longt5_tglobal", of("longt5_tglobal"), supported=False, seq2seq=True),
        Entry("llama_tampered", tampered, supported=False),
        Entry("gptj_tampered", gptj_tampered, supported=False),
    ]
    return {e.name: e for e in entries}


_POOL = {}

# scaling= drawn, and the rope parameters a transformers config carries for it
# (what patch infers left for transformers to infer the same way)
SCALINGS = {
    "linear:2": {"rope_type": "linear", "factor": 2.0},
    "yarn:4": {"rope_type": "yarn", "factor": 4.0},
    "llama3:4": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0},
}  # fmt: skip


def _scaled_witness(torch, entry, tf, scaling):
    """The pool model's weights in transformers' model whose config carries
    `scaling` (its own rope_theta and partial rotary factor kept)."""
    if scaling not in entry.scaled:
        witness = entry.model
        config_class, model_class, kwargs = tiny_models.patch_families(32, VOCAB)[entry.family]
        own = dict(witness.config.rope_parameters)
        rope = dict(SCALINGS[scaling], rope_theta=own["rope_theta"])
        if "partial_rotary_factor" in own:
            rope["partial_rotary_factor"] = own["partial_rotary_factor"]
        kwargs = dict(kwargs, rope_parameters=rope)
        kwargs.pop("rope_scaling", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = getattr(tf, model_class)(getattr(tf, config_class)(**kwargs))
        model = model.to(next(witness.parameters()).dtype).eval()
        model.load_state_dict(witness.state_dict())
        entry.scaled[scaling] = model
    return entry.scaled[scaling]


def _pool(tf):
    if not _POOL:
        _POOL.update(_entries(tf))
    return _POOL


def _witness(torch, entry, tf):
    if entry.model is None:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad():
                entry.model = entry.build(tf).eval()
    return entry.model


class Live:
    """A model being fuzzed: its entry, and what it should be."""

    def __init__(self, entry, model):
        self.entry, self.model = entry, model
        self.patched = False
        self.exact = True
        # a config edited while unpatched: patch may then refuse (its
        # reading of the config no longer transformers' module's)
        self.edited = False


def _inputs(torch, rng, entry):
    length = int(rng.choice([n for n in (3, 9, 17, 33, 40) if n <= entry.max_len]))
    batch = int(rng.integers(1, 3))
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    ids = torch.randint(2, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    pad = int(rng.integers(0, min(3, length - 1) + 1)) if batch > 1 else 0
    mask[0, :pad] = 0
    ids[0, :pad] = 0
    kwargs = {"input_ids": ids, "attention_mask": mask}
    if entry.seq2seq:
        kwargs["decoder_input_ids"] = ids[:, : max(1, length // 2)].clone()
    return kwargs


def _flags(model):
    return {n: m.training for n, m in model.named_modules()}


def _logits(torch, model, inputs):
    """The logits in eval mode, every module's flag restored after."""
    modules = list(model.modules())
    flags = [m.training for m in modules]
    try:
        for m in modules:
            m.training = False
        with torch.no_grad():
            return model(**inputs).logits
    finally:
        for m, flag in zip(modules, flags):
            m.training = flag


def _holds_posenc(model):
    return any(
        type(m).__module__.startswith("posenc")
        or any(type(v).__module__.startswith("posenc") for v in vars(m).values())
        for m in model.modules()
    )


class Checker:
    def __init__(self, torch, hf, fails, name, op):
        self.torch, self.hf, self.fails, self.name, self.op = torch, hf, fails, name, op

    def fail(self, what, detail=""):
        self.fails.add("patch", self.name, self.op, what, str(detail)[:300])

    def logits(self, live, inputs, witness, what):
        """The live model's logits against the witness's, as its state says."""
        torch = self.torch
        try:
            got = _logits(torch, live.model, inputs)
        except Exception as exc:
            self.fail(f"{what}: forward raised {type(exc).__name__}", exc)
            return None
        want = _logits(torch, witness, inputs)
        if got.shape != want.shape:
            self.fail(f"{what}: logits of shape {tuple(got.shape)}, {tuple(want.shape)} expected")
            return None
        entry = live.entry
        bitwise = (
            not live.patched
            or entry.bitwise == "always"
            or (entry.bitwise == "exact_false" and not live.exact)
        )
        if bitwise:
            if not torch.equal(got, want):
                diff = float((got - want).abs().max())
                state = "patched" if live.patched else "unpatched"
                self.fail(f"{what}: {state} logits not the witness's bits", f"off by {diff:.3g}")
        else:
            diff = float((got.double() - want.double()).abs().max())
            scale = float(want.abs().max())
            if not diff <= 1e-5 * scale + 1e-6:
                self.fail(
                    f"{what}: patched logits off the witness's", f"by {diff:.3g} of {scale:.3g}"
                )
        return got

    def state(self, live, flags, what):
        """patched_parts, posenc objects and flags as the live model's state says."""
        hf = self.hf
        parts = hf.patched_parts(live.model)
        if live.patched and live.exact and not parts:  # exact=False may keep every module
            self.fail(f"{what}: not patched")
        if not live.patched:
            if parts:
                self.fail(f"{what}: patched_parts of an unpatched model", parts)
            if _holds_posenc(live.model):
                self.fail(f"{what}: posenc objects left in an unpatched model")
        after = _flags(live.model)
        changed = [n for n in flags if n in after and after[n] != flags[n]]
        if changed:
            self.fail(f"{what}: training flags changed", changed[:3])

    def refusal(self, fn, what):
        """fn() must raise TypeError or ValueError; True if it did."""
        try:
            fn()
        except (TypeError, ValueError):
            return True
        except Exception as exc:
            self.fail(f"{what}: raised {type(exc).__name__}", exc)
            return True
        self.fail(f"{what}: not refused")
        return False


def _patch(c, live, rng, exact=None):
    """patch(live.model), checked: True if patched."""
    torch, hf = c.torch, c.hf
    exact = bool(rng.integers(2)) if exact is None else exact
    flags = _flags(live.model)
    rng_state = torch.random.get_rng_state()
    parts = hf.patched_parts(live.model)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            hf.patch(live.model, exact=exact)
            error = None
        except (TypeError, ValueError) as exc:
            error = exc
        except Exception as exc:
            c.fail(f"patch raised {type(exc).__name__}", exc)
            error = exc
    if not torch.equal(rng_state, torch.random.get_rng_state()):
        c.fail("patch moved the global RNG")
    ours = [str(w.message) for w in record if "posenc.hf.patch" in str(w.message)]
    if len(ours) > 1 or (ours and (error is not None or not exact)):
        c.fail("patch warned more than once, or on exact=False or a refusal", ours[:2])
    if error is not None:
        if live.entry.supported and not live.patched and not live.edited:
            c.fail("a supported model refused", error)
        if hf.patched_parts(live.model) != parts:
            c.fail("a refused patch changed patched_parts")
        if not live.patched and _holds_posenc(live.model):
            c.fail("a refused patch left posenc objects")
        c.state(live, flags, "refused patch")
        return False
    if live.patched or not live.entry.supported:
        c.fail("patched: a patched or unsupported model")
    live.patched, live.exact = True, exact
    c.state(live, flags, "patch")
    return True


def _unpatch(c, live):
    flags = _flags(live.model)
    if not live.patched:
        c.refusal(lambda: c.hf.unpatch(live.model), "unpatch of an unpatched model")
        return
    try:
        c.hf.unpatch(live.model)
    except Exception as exc:
        c.fail(f"unpatch raised {type(exc).__name__}", exc)
        return
    live.patched = False
    c.state(live, flags, "unpatch")


def _saved(torch, model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _op_roundtrip(c, live, rng, inputs, witness):
    torch, hf = c.torch, c.hf
    ways = {
        "pickle": lambda m: pickle.loads(pickle.dumps(m)),
        "torch.save": lambda m: _saved(torch, m),
        "deepcopy": copy.deepcopy,
    }
    way = list(ways)[int(rng.integers(len(ways)))]
    c.op = way
    before = _logits(torch, live.model, inputs)
    parts = hf.patched_parts(live.model)
    flags = _flags(live.model)
    try:
        twin = ways[way](live.model)
    except Exception as exc:
        c.fail(f"{way} raised {type(exc).__name__}", exc)
        return
    if hf.patched_parts(twin) != parts:
        c.fail(f"{way}: patched_parts differ", (hf.patched_parts(twin), parts))
    try:
        got = _logits(torch, twin, inputs)
    except Exception as exc:
        c.fail(f"{way}: the copy's forward raised {type(exc).__name__}", exc)
        return
    if not torch.equal(got, before):
        c.fail(f"{way}: the copy's logits differ")
    if _flags(twin) != flags:
        c.fail(f"{way}: the copy's training flags differ")
    live.model = twin  # the copy carries on


def _op_patched_block(c, live, inputs, witness, rng):
    hf = c.hf
    if live.patched:
        c.refusal(lambda: hf.patched(live.model).__enter__(), "patched() of a patched model")
        c.state(live, _flags(live.model), "patched() refused")
        return
    flags = _flags(live.model)
    exact = bool(rng.integers(2))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hf.patched(live.model, exact=exact):
                live.patched, live.exact = True, exact
                c.logits(live, inputs, witness, "inside patched()")
    except (TypeError, ValueError) as exc:
        if live.entry.supported and not live.edited:
            c.fail("patched() refused a supported model", exc)
    except Exception as exc:
        c.fail(f"patched() raised {type(exc).__name__}", exc)
    live.patched = False
    c.state(live, flags, "after patched()")
    c.logits(live, inputs, witness, "after patched()")


def _op_submodule(c, live, rng, inputs, witness):
    """patch of a submodule: refused inside a patched model; otherwise
    patched or refused, and then the model holding it is not patched."""
    hf = c.hf
    children = [m for n, m in live.model.named_modules() if n]
    sub = children[int(rng.integers(len(children)))]
    flags = _flags(live.model)
    if live.patched:
        if hf.patched_parts(sub) or sub is live.model:
            return
        c.refusal(lambda: hf.patch(sub), "patch of a part of a patched model")
        c.state(live, flags, "patch of a part")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hf.patch(sub)
        except (TypeError, ValueError):
            c.state(live, flags, "refused patch of a part")
            return
        except Exception as exc:
            c.fail(f"patch of a part raised {type(exc).__name__}", exc)
            return
    c.refusal(lambda: hf.patch(live.model), "patch of a model holding a patched part")
    hf.unpatch(sub)
    c.state(live, flags, "unpatch of a part")
    c.logits(live, inputs, witness, "after a part patched and unpatched")


def _op_flags(live, rng):
    for m in live.model.modules():
        if rng.random() < 0.3:
            m.training = bool(rng.integers(2))


def _op_edit(c, live, rng, inputs, witness):
    if not live.entry.edits:
        return False
    edit = live.entry.edits[int(rng.integers(len(live.entry.edits)))]
    c.op = f"config edit {edit.__name__}"
    live.edited = True
    try:
        edit(live.model.config)
    except Exception as exc:
        c.fail(f"the edit raised {type(exc).__name__}", exc)
    c.logits(live, inputs, witness, "after a config edit")
    return True


def _op_scaled(c, live, rng, inputs, tf):
    """patch with scaling= (or prepare, then apply): the scaled witness's
    logits, one warning (what was inferred), unpatch the witness's bits; a
    refusal that leaves the model as it was where the model is patched, not
    rotary, or its config edited."""
    torch, hf = c.torch, c.hf
    scaling = list(SCALINGS)[int(rng.integers(len(SCALINGS)))]
    how = "prepare" if rng.random() < 0.5 else "patch"
    c.op = f"{how} scaling={scaling}"
    flags = _flags(live.model)
    parts = hf.patched_parts(live.model)
    before = _logits(torch, live.model, inputs)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            if how == "prepare":
                ready = hf.prepare(live.model, scaling=scaling)
                if hf.patched_parts(live.model) != parts:
                    c.fail("prepare changed the model")
                ready.apply()
            else:
                hf.patch(live.model, scaling=scaling)
            error = None
        except (TypeError, ValueError) as exc:
            error = exc
        except Exception as exc:
            c.fail(f"scaling= raised {type(exc).__name__}", exc)
            return
    applies = live.entry.scalable and not live.patched
    if error is not None:
        # a config edited since the model was built may be refused (posenc
        # reads the config, transformers' module does not)
        if applies and not live.edited:
            c.fail("scaling= refused on a model it applies to", error)
        if hf.patched_parts(live.model) != parts:
            c.fail("a refused scaling= changed patched_parts")
        c.state(live, flags, "refused scaling=")
        if not torch.equal(_logits(torch, live.model, inputs), before):
            c.fail("a refused scaling= changed the logits")
        return
    live.patched, live.exact = True, True
    if not applies:
        c.fail("scaling= applied to a model it should refuse")
    else:
        ours = [str(w.message) for w in record if "posenc.hf.patch" in str(w.message)]
        if len([w for w in ours if "inferred" in w]) != 1:
            c.fail("scaling= did not say once what it inferred", ours[:2])
        c.state(live, flags, "scaling=")
        if live.entry.family is not None and not live.edited:
            want = _logits(torch, _scaled_witness(torch, live.entry, tf, scaling), inputs)
            got = _logits(torch, live.model, inputs)
            diff = float((got.double() - want.double()).abs().max())
            scale = float(want.abs().max())
            if not diff <= 1e-5 * scale + 1e-6:
                c.fail("scaled logits off the scaled witness's", f"by {diff:.3g} of {scale:.3g}")
    _unpatch(c, live)
    c.logits(live, inputs, live.entry.model, "unpatch after scaling=")


OPS = ("patch", "unpatch", "patched", "roundtrip", "edit", "flags", "double", "submodule",
       "logits", "scaled")  # fmt: skip


def run(seconds, seed, fails, names=None):
    """Fuzz patch for `seconds` from `seed`, failures into `fails` (a
    fuzz_api.Failures), on the pool's models (or those of `names`);
    returns the counts of operations by (model name, operation)."""
    import torch
    import transformers

    import posenc.hf as hf

    transformers.logging.set_verbosity_error()
    rng = np.random.default_rng(seed)
    pool = _pool(transformers)
    names = sorted(pool) if names is None else list(names)
    counts = {}
    lives = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not lives or (len(lives) < 4 and rng.random() < 0.15):
            entry = pool[names[int(rng.integers(len(names)))]]
            try:
                witness = _witness(torch, entry, transformers)
            except Exception as exc:
                fails.add("patch", entry.name, "build", f"cannot build: {type(exc).__name__}",
                          str(exc)[:300])  # fmt: skip
                names.remove(entry.name)
                continue
            live = Live(entry, copy.deepcopy(witness))
            lives.append(live)
            # a fresh model is patched first, mostly
            if entry.supported and rng.random() < 0.7:
                c = Checker(torch, hf, fails, entry.name, "patch")
                if _patch(c, live, rng):
                    c.logits(live, _inputs(torch, rng, entry), witness, "patch")
                counts[(entry.name, "patch")] = counts.get((entry.name, "patch"), 0) + 1
            continue
        live = lives[int(rng.integers(len(lives)))]
        entry = live.entry
        witness = entry.model
        op = OPS[int(rng.integers(len(OPS)))]
        c = Checker(torch, hf, fails, entry.name, op)
        inputs = _inputs(torch, rng, entry)
        if op == "patch":
            if _patch(c, live, rng):
                c.logits(live, inputs, witness, "patch")
        elif op == "unpatch":
            _unpatch(c, live)
            c.logits(live, inputs, witness, "unpatch")
        elif op == "patched":
            _op_patched_block(c, live, inputs, witness, rng)
        elif op == "roundtrip":
            _op_roundtrip(c, live, rng, inputs, witness)
            op = c.op
            c.logits(live, inputs, witness, "the copy")
            if live.patched and rng.random() < 0.5:  # unpatch restores the copy
                c.op = op
                _unpatch(c, live)
                c.logits(live, inputs, witness, "the copy unpatched")
        elif op == "edit":
            if not _op_edit(c, live, rng, inputs, witness):
                continue
            op = c.op
        elif op == "flags":
            _op_flags(live, rng)
        elif op == "double":
            if not live.patched:
                continue
            flags = _flags(live.model)
            c.refusal(functools.partial(hf.patch, live.model), "patch of a patched model")
            c.state(live, flags, "second patch")
            c.logits(live, inputs, witness, "after a second patch")
        elif op == "submodule":
            _op_submodule(c, live, rng, inputs, witness)
        elif op == "scaled":
            _op_scaled(c, live, rng, inputs, transformers)
        else:
            c.logits(live, inputs, witness, "forward")
        counts[(entry.name, op)] = counts.get((entry.name, op), 0) + 1
        if rng.random() < 0.05:
            lives.remove(live)  # retire it
    return counts


if __name__ == "__main__":  # tests/fuzz_api.py's command line, this surface chosen
    sys.exit(fuzz_api.main(["--surfaces", "patch", *sys.argv[1:]]))
