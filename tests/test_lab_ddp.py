"""posenc.lab under torchrun: 2 CPU processes (gloo) give what 1 process gives.

Data parallel: each process takes its slice of the same global batch, so the
losses, perplexities and skip-attack figures of 2 processes are those of 1
process with the same global batch, up to float rounding.  The grid split:
each run is trained by one process alone, so every figure is the same as one
process's, bit for bit, and every process returns the whole comparison.
torch is required under POSENC_REQUIRE_CONFORMANCE=1 and the tests are skipped
without it otherwise.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from lab_ddp_worker import MODES, compare_args
from optional import require

import posenc

torch = require("torch")

from posenc import lab  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(posenc.__file__))


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The records of both modes from one torchrun launch of 2 processes
    (each on one thread), per mode: [rank 0's, rank 1's]."""
    out = str(tmp_path_factory.mktemp("ddp") / "lab")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        os.path.join(TESTS, "lab_ddp_worker.py"), out,
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        mode: [json.load(open(f"{out}.{mode}.{rank}.json", encoding="utf-8")) for rank in (0, 1)]
        for mode in MODES
    }


def _alone(mode):
    """The comparison in this process alone, on one thread as the workers."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return lab.compare(**compare_args(mode)).to_dict()
    finally:
        torch.set_num_threads(threads)


def test_two_processes_train_as_one_with_the_same_global_batch(launched):
    ranks = launched["data"]
    alone = _alone("data")
    for got in ranks:
        assert got["world_size"] == 2 and got["settings"]["world_size"] == 2
        for label in alone["labels"]:
            np.testing.assert_allclose(
                got["loss_curves"][label], alone["loss_curves"][label], rtol=1e-5
            )
            np.testing.assert_allclose(got["values"][label], alone["values"][label], rtol=1e-5)
            for k, values in alone["skip"][label].items():
                np.testing.assert_allclose(got["skip"][label][k], values, rtol=1e-5)
    assert ranks[0]["values"] == ranks[1]["values"]


def test_the_grid_split_over_two_processes_gives_every_run_as_one_process(launched):
    ranks = launched["grid"]
    alone = _alone("grid")
    for got in ranks:
        assert got["settings"]["parallel"] == "grid"
        assert got["values"] == alone["values"]
        assert got["loss_curves"] == alone["loss_curves"]
