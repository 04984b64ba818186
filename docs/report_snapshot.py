"""What the docs' scripts share: a report made by posenc's command line on
tiny models, and the copy of it kept in the repository.

``docs/make_probe_report.py`` and ``docs/make_context_report.py`` run posenc
on tiny transformers models, which needs torch and transformers; a docs
build without them (``pip install ".[docs]"`` alone) takes the copy kept in
``docs/reports/`` instead: the text and pictures the scripts made last time
they were run with ``--snapshot`` (after a change to what they show).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "reports")


def use_this_tree():
    """A script run by hand imports this tree's posenc where it is built in
    place, as docs/conf.py takes it."""
    root = os.path.dirname(HERE)
    if glob.glob(os.path.join(root, "posenc", "_core*.so")) + glob.glob(
        os.path.join(root, "posenc", "_core*.pyd")
    ):
        sys.path.insert(0, root)


def run_cli(folder, argv):
    """``posenc <argv>`` run in `folder`: ``(exit status, its stdout)``."""
    from posenc.__main__ import main

    here = os.getcwd()
    buffer = io.StringIO()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(buffer):
            code = main(argv)
    finally:
        os.chdir(here)
    return code, buffer.getvalue()


def keep(out, names):
    """Copy `names` (files or folders of `out`) into docs/reports/."""
    for name in names:
        source, target = os.path.join(out, name), os.path.join(KEPT, name)
        if os.path.isdir(source):
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)


def restore(out, names):
    """Put the kept `names` into `out`; False if no copy is kept."""
    if not all(os.path.exists(os.path.join(KEPT, name)) for name in names):
        return False
    for name in names:
        source, target = os.path.join(KEPT, name), os.path.join(out, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
    return True


def main(argv, *, description, page, kept, needs, save, cli, shown):
    """A report script's command line (``--out``, ``--snapshot``): `save`
    the models and text under the output folder, run ``posenc <cli>`` there
    and write its output to `page` as a code block under the command line
    `shown`; without the packages `needs`, the kept copy of `kept`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=os.path.join(HERE, "_generated"))
    parser.add_argument(
        "--snapshot", action="store_true", help="keep what is made in docs/reports/ too"
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, page)
    try:
        for module in needs:
            __import__(module)
    except ImportError as exc:
        if not restore(args.out, kept):
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"(not made here: {exc.name} is not installed)\n")
        return 0
    save(args.out)
    code, out = run_cli(args.out, cli)
    if code != 0:
        raise SystemExit(f"posenc {cli[0]} failed ({code}):\n{out}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"```text\n$ {shown}\n{out}```\n")
    if args.snapshot:
        keep(args.out, kept)
    return 0
