"""Small problems for the lab's tests, written here by hand (a module shared by
test_lab.py, test_lab_ddp.py and the DDP worker, not collected by pytest).

``CopyTask`` follows posenc.lab.tasks' Task: ``batch(n, length, rng)`` gives
tokens and the targets already shifted (``targets[:, t]`` is what the output
at position t must be, -100 where there is no loss).
"""

from types import SimpleNamespace

import numpy as np

#: Some English text for the language-modelling tests (byte-level).
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
    "was the season of Light, it was the season of Darkness, it was the spring of hope, it "
    "was the winter of despair, we had everything before us, we had nothing before us. "
) * 6


class CopyTask:
    """``x_1 .. x_m SEP x_1 .. x_m`` (padded with 0 to the length): the model
    copies the m symbols after the separator."""

    name = "copy"
    vocab_size = 10
    pad_id = 0
    min_length = 3

    def batch(self, n, length, rng):
        if length < self.min_length:
            raise ValueError(f"length must be >= {self.min_length}")
        m = (length - 1) // 2
        body = rng.integers(2, self.vocab_size, size=(n, m))
        tokens = np.zeros((n, length), np.int64)
        tokens[:, :m] = body
        tokens[:, m] = 1
        tokens[:, m + 1 : 2 * m + 1] = body[:, : length - m - 1]
        targets = np.full((n, length), -100, np.int64)
        targets[:, m : 2 * m] = body
        return SimpleNamespace(tokens=tokens, targets=targets)


def tasks_module():
    """A stand-in for posenc.lab.tasks holding the copy task."""
    return SimpleNamespace(TASKS={"copy": CopyTask})


def text_data():
    """A TextData of TEXT's bytes, 90 % to train."""
    ids = np.frombuffer(TEXT.encode(), dtype=np.uint8).astype(np.int64)
    cut = int(ids.size * 0.9)
    return SimpleNamespace(
        train=ids[:cut], valid=ids[cut:], vocab_size=256, tokenizer="bytes", source="TEXT"
    )


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
    return SimpleNamespace(
        train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
        n_classes=2, vocab_size=8, pad_id=0, name="order",
    )  # fmt: skip
