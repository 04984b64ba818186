"""The last made copy of the docs' reports, kept in the repository.

``docs/make_probe_report.py`` and ``docs/make_context_report.py`` run posenc
on tiny transformers models, which needs torch and transformers; a docs
build without them (``pip install ".[docs]"`` alone) takes the copy kept in
``docs/reports/`` instead: the text and pictures the scripts made last time
they were run with ``--snapshot`` (after a change to what they show).
"""

from __future__ import annotations

import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "reports")


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
