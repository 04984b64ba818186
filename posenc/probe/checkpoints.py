"""Finding a position-embedding table in a checkpoint file, a model directory,
a state dict or a model: :func:`load_position_embeddings` and the file formats
it reads (``.npy``, ``.npz``, ``.safetensors``, torch checkpoints).
"""

from __future__ import annotations

from typing import Any, Optional

from .._typing import NDArray
from ._loading import load_table
from ._readers import KNOWN_KEYS as KNOWN_KEYS  # the tables' names, public here
from ._tables import _to_numpy


def load_position_embeddings(
    source: object,
    *,
    key: Optional[str] = None,
    timeout: Optional[float] = None,
    deadline: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> NDArray[Any]:
    """Find the position-embedding table in a file, a state dict or a model.

    Parameters
    ----------
    source : str, os.PathLike, mapping, model or array
        - a ``.npy`` file (the table itself) or a ``.npz`` file;
        - a ``.safetensors`` file, or a model directory holding
          ``*.safetensors`` files (sharded checkpoints included);
        - a torch checkpoint (``.bin``, ``.pt``, ``.pth``, ``.ckpt``; needs
          torch, loaded with ``weights_only=True``), or a directory of them;
        - a sharded checkpoint's index (``model.safetensors.index.json``,
          ``pytorch_model.bin.index.json``), which a model directory holding
          one is read through: only the shard holding the table is read;
        - an in-memory state dict (nested dicts are flattened with dots), or
          any object with ``state_dict()`` such as a transformers model;
        - an array or tensor, returned as it is (checked to be 2-D);
        - the name of a model on the Hugging Face Hub (``"gpt2"``,
          ``"org/name"``, ``"org/name@revision"``: a string that is not an
          existing path), read through ``huggingface_hub`` (``pip install
          "posenc[hub]"``): only the safetensors header and the table's
          bytes are fetched, by HTTP range requests, and cached so that a
          second run works offline.
    key : str, optional
        The name of the table.  By default the one key ending in
        ``wpe.weight`` (GPT-2), ``embeddings.position_embeddings.weight``
        (BERT, RoBERTa) or ``embed_positions.weight`` (BART, OPT), with any
        prefix; a source holding a single array needs none.
    timeout : float, optional
        A Hub name only: the seconds each HTTP request may wait to connect
        and for its next bytes.  Default: ``HF_HUB_ETAG_TIMEOUT`` for the
        model info, ``HF_HUB_DOWNLOAD_TIMEOUT`` for the files (whole
        seconds, as huggingface_hub reads them), else 10.
    deadline : float, optional
        A Hub name only: the seconds the whole load may take, however the
        server stalls or trickles.  Default: ``POSENC_HUB_DEADLINE``, else
        120.
    max_bytes : int, optional
        A Hub name only: the largest table fetched, by its declared shape
        and dtype (and data offsets), checked before any of its bytes are
        asked for.  Default: ``POSENC_HUB_MAX_BYTES``, else 256 MiB.

    Returns
    -------
    ndarray of shape (n_positions, dim)
        The stored values (bfloat16 widened to float32).

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    OSError
        A Hub model that cannot be read (:class:`~posenc.probe.HubError`:
        missing, gated, no safetensors weights, no network or offline with
        nothing cached, no answer within `timeout`, past the `deadline`, a
        redirect loop, an answer that is not what was asked for); the
        message is one line naming the repository and what to do.
    ValueError
        Not a regular file (a FIFO, a device or a socket is refused without
        being opened, in a model directory too), not a readable or valid
        file (a safetensors header out of bounds or inconsistent, an ``.npy``
        header declaring more data than the file holds, an index naming a
        shard outside its directory), no table found (the message lists the
        keys seen), several candidates, or not 2-D; a Hub name or revision
        that is not one, a Hub table declared larger than `max_bytes`.
    TypeError
        `timeout`, `deadline` or `max_bytes` not a number.

    Notes
    -----
    Only the table is read: one member of an ``.npz`` (and of it only the
    bytes its header declares, so a compressed member cannot inflate past
    its shape), one tensor of a ``.safetensors`` file, one shard of an
    indexed checkpoint.  A torch file is read whole by ``torch.load``.


    RoBERTa-family and BART/OPT tables keep two reserved rows before
    position 0 (RoBERTa-base has 514 rows for 512 positions): probe
    ``E[2:]`` to compare with the paper's 512 positions.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "weights.npz")
    >>> np.savez(path, **{"embeddings.position_embeddings.weight": np.eye(4, 3)})
    >>> load_position_embeddings(path)
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 1.],
           [0., 0., 0.]])
    """
    table, used = load_table(source, key, timeout=timeout, deadline=deadline, max_bytes=max_bytes)
    arr = _to_numpy(table)
    if arr.ndim != 2:
        what = f"the table under {used!r}" if used else "the table"
        raise ValueError(f"{what} must be 2-D (n_positions, dim), got shape {arr.shape}")
    return arr
