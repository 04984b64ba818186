"""A model for ``posenc context``: its config, tokenizer and weights by
transformers' ``from_pretrained`` (a model folder, or a Hub name read
through the user's Hugging Face cache, token and endpoint), a text from a
file or a data set, and the one-line errors of each step.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, List, Optional, Tuple

from ..probe._optional import require

#: The files one of which a model folder's tokenizer is read from.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


class LoadError(ValueError):
    """A model, tokenizer or text that cannot be read: one line saying why."""


def transformers_module(purpose: str) -> Any:
    require("torch", purpose, extra="context")
    return require("transformers", purpose, extra="context")


def source_of(name: str) -> Tuple[str, Optional[str], bool]:
    """``(path or repo id, revision, is a local folder)`` of a MODEL argument:
    an existing folder, else a Hub name ``org/name[@revision]``."""
    if os.path.isdir(name):
        return name, None, True
    if os.path.exists(name):
        raise LoadError(f"{name}: a file; MODEL is a model folder or a Hub name (org/name)")
    repo, _, revision = name.partition("@")
    if not repo or (name.count("@") and not revision):
        raise LoadError(f"{name}: not a Hub name (org/name or org/name@revision)")
    return repo, revision or None, False


def _chain(exc: BaseException) -> List[BaseException]:
    out: List[BaseException] = []
    seen = exc
    while seen is not None and seen not in out:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return out


def hub_error(name: str, what: str, exc: BaseException) -> LoadError:
    """The one line of a failed read of `what` (config, tokenizer, weights)
    of the Hub model `name`: no network, not found, gated, no such revision."""
    kinds = {type(e).__name__ for e in _chain(exc)}
    text = " ".join(str(e) for e in _chain(exc))
    if "GatedRepoError" in kinds:
        why = "is gated: accept its terms on the Hub and log in (hf auth login) or set HF_TOKEN"
    elif "RevisionNotFoundError" in kinds:
        why = "has no such revision"
    elif "RepositoryNotFoundError" in kinds:
        why = (
            "is not on the Hub (or is private: log in with hf auth login or set HF_TOKEN); "
            "a local model is a folder that exists"
        )
    elif (
        kinds & {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError"}
        or "couldn't connect" in text
        or "offline mode" in text.lower()
    ):
        why = (
            "cannot be read: the Hub cannot be reached (no network, or HF_HUB_OFFLINE=1) and "
            "the Hugging Face cache holds no copy; run once with the network, or give a "
            "model folder"
        )
    else:
        return LoadError(f"{name}: its {what} could not be read ({' '.join(str(exc).split())})")
    return LoadError(f"{name}: {why} (reading its {what})")


def load_config(name: str) -> Any:
    """The model's transformers config."""
    transformers = transformers_module("posenc context")
    path, revision, local = source_of(name)
    try:
        return transformers.AutoConfig.from_pretrained(path, revision=revision)
    except (OSError, ValueError, KeyError) as exc:
        if local:
            raise LoadError(f"{name}: not a model folder transformers reads ({exc})") from exc
        raise hub_error(name, "config", exc) from exc


def commit_of(name: str) -> Optional[str]:
    """The commit of a Hub model's copy in the Hugging Face cache (None for a
    folder, or where the cache does not say)."""
    path, revision, local = source_of(name)
    if local:
        return None
    try:
        hub = require("huggingface_hub", "posenc context", extra="context")
        found = hub.try_to_load_from_cache(path, "config.json", revision=revision)
    except Exception:  # a cache it cannot read: the commit is not known
        return None
    if not isinstance(found, str):
        return None
    parts = os.path.normpath(found).split(os.sep)
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None


def load_tokenizer(name: str) -> Any:
    """The model's tokenizer; a LoadError when it has none."""
    transformers = transformers_module("posenc context")
    path, revision, local = source_of(name)
    missing = LoadError(
        f"{name} has no tokenizer ({', '.join(TOKENIZER_FILES[:3])}, ...), so no text can "
        "be read by it; give a model saved with its tokenizer"
    )
    if local and not any(f in TOKENIZER_FILES for f in os.listdir(path)):
        raise missing
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, revision=revision)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if local:
            raise LoadError(f"{name}: its tokenizer could not be read ({exc})") from exc
        kinds = {type(e).__name__ for e in _chain(exc)}
        if "EntryNotFoundError" in kinds or "RemoteEntryNotFoundError" in kinds:
            raise missing from exc
        error = hub_error(name, "tokenizer", exc)
        if "could not be read" in str(error):
            raise missing from exc
        raise error from exc
    if tokenizer is None or not callable(tokenizer):
        raise missing
    return tokenizer


def load_model(name: str, dtype: Any, device: str) -> Any:
    """The causal LM, in `dtype` (a torch dtype, or None: the checkpoint's),
    on `device`, in eval mode."""
    transformers = transformers_module("posenc context")
    path, revision, local = source_of(name)
    kwargs: dict = {"revision": revision}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device != "cpu":
        kwargs["device_map"] = device
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        if local:
            raise LoadError(f"{name}: its weights could not be loaded ({exc})") from exc
        raise hub_error(name, "weights", exc) from exc
    return model.eval()


def parameter_count(config: Any) -> Optional[int]:
    """The parameters of the causal LM of `config`, counted on torch's meta
    device (nothing allocated); None where transformers cannot build it so."""
    transformers = transformers_module("posenc context")
    torch = require("torch", "posenc context", extra="context")
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    except Exception:  # a model class that will not build on meta: the config's estimate
        return None
    return int(sum(p.numel() for p in model.parameters()))


def read_text(path: str) -> str:
    """The UTF-8 text of `path`, whole."""
    if not os.path.isfile(path):
        raise LoadError(f"--text: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise LoadError(f"--text: {path} is not UTF-8 text ({exc.reason})") from exc
    if not text.strip():
        raise LoadError(f"--text: {path} holds no text")
    return text


def dataset_spec(spec: str) -> Tuple[str, Optional[str], str]:
    """``(name, config, split)`` of ``NAME[:CONFIG[:SPLIT]]`` (split ``test``
    by default)."""
    parts = spec.split(":")
    if len(parts) > 3 or not parts[0]:
        raise LoadError(f"--dataset: {spec!r} is not NAME, NAME:CONFIG or NAME:CONFIG:SPLIT")
    name = parts[0]
    config = parts[1] if len(parts) > 1 and parts[1] else None
    split = parts[2] if len(parts) > 2 and parts[2] else "test"
    return name, config, split


def dataset_texts(spec: str, column: str) -> Iterable[str]:
    """The texts of a data set's split, streamed (read as far as they are used)."""
    datasets = require("datasets", "--dataset", extra="context")
    name, config, split = dataset_spec(spec)
    try:
        rows = datasets.load_dataset(name, config, split=split, streaming=True)
    except Exception as exc:  # the library's own errors: not found, no such split, offline
        raise LoadError(f"--dataset {spec}: {' '.join(str(exc).split())}") from exc

    def texts() -> Iterable[str]:
        for i, row in enumerate(rows):
            if column not in row:
                raise LoadError(
                    f"--dataset {spec}: row {i} has no column {column!r} (it has "
                    f"{', '.join(map(str, row))}); choose one with --column"
                )
            value = row[column]
            if isinstance(value, str) and value.strip():
                yield value

    return texts()


def tokens_of_texts(tokenizer: Any, texts: Iterable[str], most: Optional[int]) -> List[int]:
    """The token ids of the texts joined by blank lines (as Hugging Face's
    recipe joins a data set's), read until `most` tokens are there (all
    without a bound), cut to `most`."""
    joined: List[str] = []
    chars, ids = 0, []
    target = None if most is None else 8 * most  # characters read before tokenizing
    for text in texts:
        joined.append(text)
        chars += len(text) + 2
        if target is not None and chars >= target:
            ids = tokenizer("\n\n".join(joined))["input_ids"]
            if len(ids) >= most:  # type: ignore[operator]
                return [int(i) for i in ids[:most]]
            target *= 2
    if not joined:
        raise LoadError("--dataset: no text in the split's rows")
    ids = tokenizer("\n\n".join(joined))["input_ids"]
    return [int(i) for i in (ids if most is None else ids[:most])]
