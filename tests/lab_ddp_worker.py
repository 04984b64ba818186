"""One process of the lab's DDP test (tests/test_lab_ddp.py launches it with
torchrun): the comparison of `compare_args(mode)` in each mode, its record
written to ``<out>.<mode>.<rank>.json``."""

import json
import sys

from lab_standins import copy_task, text_data

from posenc import lab
from posenc.lab.train import TrainConfig, world

#: The ways the processes share a comparison (compare's `parallel`).
MODES = ("data", "grid")


def compare_args(mode):
    """compare()'s arguments in each mode: data-parallel language modelling,
    or a grid of runs dealt out to the processes."""
    if mode == "data":
        return dict(
            encodings=["rope", "xl", "sinusoid+randomized"], task="lm", text=text_data(),
            train_length=16, eval_lengths=[16, 32], seeds=[0], skip=(1, 2), dim=16, heads=2,
            config=TrainConfig(steps=5, batch_size=8, lr=3e-3, eval_tokens=96, eval_batch_size=2),
        )  # fmt: skip
    return dict(
        encodings=["rope", "alibi+randomized"], task=copy_task(), train_length=9,
        eval_lengths=[9, 18], seeds=[0, 1], dim=16, heads=2,
        config=TrainConfig(steps=5, batch_size=8, lr=3e-3, eval_samples=16),
    )  # fmt: skip


def main():
    out = sys.argv[1]
    for mode in MODES:
        result = lab.compare(parallel=mode, **compare_args(mode))
        rank, size = world()
        with open(f"{out}.{mode}.{rank}.json", "w", encoding="utf-8") as f:
            json.dump({"world_size": size, **result.to_dict()}, f)


if __name__ == "__main__":
    main()
