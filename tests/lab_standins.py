"""Small problems for the lab's tests (a module shared by test_lab.py,
test_lab_ddp.py and the DDP worker, not collected by pytest): posenc.lab's
own task, text and classification types, filled with data made here."""

import numpy as np

from posenc.lab.data import ClassificationData, TextData
from posenc.lab.tasks import TASKS

#: Some English text for the language-modelling tests (byte-level).
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
    "was the season of Light, it was the season of Darkness, it was the spring of hope, it "
    "was the winter of despair, we had everything before us, we had nothing before us. "
) * 6


def copy_task():
    """posenc.lab's copy task over 8 symbols."""
    return TASKS["copy"](n_symbols=8)


def text_data():
    """TEXT's bytes, 90 % to train."""
    ids = np.frombuffer(TEXT.encode(), dtype=np.uint8).astype(np.int64)
    cut = int(ids.size * 0.9)
    return TextData(ids[:cut], ids[cut:], 256, "bytes", "TEXT")


def classification_data(n_train=64, n_test=32, length=12, seed=0):
    """Sequences of 3..length tokens, padded with 0; the label is whether
    token 2 comes before token 3 (an order the model must see)."""
    rng = np.random.default_rng(seed)

    def make(n):
        x = np.zeros((n, length), np.int64)
        y = np.zeros(n, np.int64)
        for i in range(n):
            size = int(rng.integers(3, length + 1))
            row = rng.integers(4, 8, size=size)
            a, b = rng.choice(size, 2, replace=False)
            row[a], row[b] = 2, 3
            x[i, :size] = row
            y[i] = int(a < b)
        return x, y

    train_x, train_y = make(n_train)
    test_x, test_y = make(n_test)
    return ClassificationData(train_x, train_y, test_x, test_y, 2, 8, 0, "order")
