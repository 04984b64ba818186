"""Command line of posenc.

python -m posenc info                       version, SIMD path, threads, NumPy
python -m posenc probe                      probe the 512 x 768 sinusoid
python -m posenc probe --source FILE        probe a table in a .npy, .npz,
                                            .safetensors or torch file
"""

from __future__ import annotations

import argparse
import json
import os
import sys

_PROG = "python -m posenc"

_PROBE_HELP = """\
Run Wang & Chen's probes ("What Do Position Embeddings Learn?", EMNLP 2020)
on a position-embedding table and print the figures beside the published
ones: absolute position by linear regression (MAE, in positions) and
relative order by logistic regression (error rate), mean and standard
deviation over seeds, with the table's informativeness.  Without --source,
the built-in 512 x 768 sinusoid of Vaswani et al. is probed."""


def _build_parser():
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Positional encodings of Transformer models, and probes of what a "
        "position embedding has learned.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{info,probe}")
    sub.add_parser("info", help="print version, SIMD path, threads and NumPy version")
    probe = sub.add_parser(
        "probe",
        help="probe a position-embedding table (default: the 512 x 768 sinusoid)",
        description=_PROBE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    probe.add_argument(
        "--source",
        metavar="FILE",
        help="a .npy/.npz/.safetensors/torch file or a model directory holding the table",
    )
    probe.add_argument(
        "--key",
        metavar="K",
        help="name of the table in the file (default: the one key ending in wpe.weight, "
        "embeddings.position_embeddings.weight or embed_positions.weight)",
    )
    probe.add_argument("--name", help="what to call the table in the output")
    probe.add_argument(
        "--seeds", type=int, default=10, metavar="N", help="run the probes with seeds 0..N-1"
    )
    probe.add_argument("--plot", metavar="PNG", help="write the figure to this PNG file")
    probe.add_argument("--json", metavar="FILE", help="write the figures to this JSON file")
    probe.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr while probing"
    )
    return parser


class _Failure(Exception):
    """An error the command line reports in one line, without a traceback."""


def _check_writable(path, what):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise _Failure(f"{what}: no such directory: {folder}")
    if os.path.isdir(path):
        raise _Failure(f"{what}: {path} is a directory")


def _probe(args):
    from . import probe, sinusoid

    if args.key is not None and args.source is None:
        raise _Failure("--key needs --source")
    if args.seeds < 1:
        raise _Failure(f"--seeds must be >= 1, got {args.seeds}")
    for path, what in ((args.plot, "--plot"), (args.json, "--json")):
        if path is not None:
            _check_writable(path, what)

    if args.source is None:
        table = sinusoid(512, 768, dtype="float64")
        name = args.name or "sinusoid 512x768"
        where = "built in: posenc.sinusoid(512, 768), base 10000, interleaved"
        key = None
    else:
        loaded, key = probe._load(args.source, args.key)
        table = probe._to_numpy(loaded)
        where = args.source + (f" [{key}]" if key else "")
        name = args.name or os.path.basename(os.path.normpath(args.source))
    table = probe._table(table, f"the table in {where}", min_rows=5)

    result = probe.report(table, name=name, seeds=args.seeds, progress=not args.no_progress)
    print(f"{name}: {where}")
    print()
    print(result.to_markdown())
    if args.plot is not None:
        result.plot(args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json is not None:
        data = result.to_dict()
        data["source"] = args.source
        data["key"] = key
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 0


def _one_line(exc):
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    return " ".join(text.split())


def main(argv=None):
    args = _build_parser().parse_args(argv)
    if args.command == "info":
        from . import show_config

        show_config()
        return 0
    try:
        return _probe(args)
    except (_Failure, OSError, ValueError, TypeError, KeyError, ImportError) as exc:
        print(f"{_PROG} probe: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
