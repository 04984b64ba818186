"""Command line: ``python -m posenc info`` (and, later, ``probe``)."""

from __future__ import annotations

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m posenc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print version, SIMD path, threads and NumPy version")
    args = parser.parse_args(argv)
    if args.command == "info":
        from . import show_config

        show_config()
    return 0


if __name__ == "__main__":
    sys.exit(main())
