"""The lab guide's published results: the tables and figures that
``benchmarks/lab_results.py`` made, put where the guide reads them.

Training the models takes about half an hour on a CPU, so a docs build
never does it: ``python benchmarks/lab_results.py --out DIR --snapshot``
keeps its ``NAME.md``, ``NAME.png`` and ``NAME.json`` in
``docs/reports/lab_results/``, and this script (run by docs/conf.py) copies
them to ``lab_results/`` under the output folder, from which
docs/guide/lab.md includes them::

    python docs/make_lab_results.py [--out docs/_generated]

Where nothing is kept, each ``NAME.md`` says so.
"""

from __future__ import annotations

import argparse
import os
import sys

import report_snapshot

HERE = os.path.dirname(os.path.abspath(__file__))
#: the folder kept in docs/reports/ and put under the output folder
FOLDER = "lab_results"
#: the experiments of benchmarks/lab_results.py the guide shows
NAMES = ("alibi_lm", "selective_copy")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "_generated"))
    args = parser.parse_args(argv)
    os.makedirs(os.path.join(args.out, FOLDER), exist_ok=True)
    kept = [os.path.join(FOLDER, f"{name}.{ext}") for name in NAMES for ext in ("md", "png")]
    if not report_snapshot.restore(args.out, kept):
        for name in NAMES:
            with open(os.path.join(args.out, FOLDER, f"{name}.md"), "w", encoding="utf-8") as f:
                f.write(
                    "(not kept here: run `python benchmarks/lab_results.py --out DIR --snapshot`)\n"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
