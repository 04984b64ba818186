"""posenc.lab.tasks: each task's sequences hold what its docstring says.

The witness for each task is an independent reading of the sequences: the
tokens turned back into names, the instance parsed as a person would read
it, the answer computed in plain Python (Python ints for addition, a dict
for associative recall, a running bit for flip-flop) and compared with the
tokens that carry a loss, at every length from the task's shortest to
1024 (16 times a training length of 64).
"""

import doctest

import numpy as np
import pytest

from posenc.lab import tasks
from posenc.lab.tasks import IGNORE, TASKS, TaskBatch, exact_match, greedy_decode

MAX_LENGTH = 1024  # 16 x a typical training length of 64


def sequences(task, batch):
    """Each row as names: the whole sequence (tokens and the last target),
    and the set of its positions that carry a loss."""
    rows = []
    for tokens, targets in zip(batch.tokens, batch.targets):
        seq = list(tokens) + [int(targets[-1])]
        scored = {t + 1 for t in np.flatnonzero(targets != IGNORE)}
        # the targets are the next tokens where they are set
        for t in np.flatnonzero(targets != IGNORE):
            assert targets[t] == seq[t + 1]
        rows.append(([task.token_names[i] for i in seq], scored))
    return rows


def strip_padding(names, scored):
    """The sequence from <bos> on: only pads may stand before it."""
    start = names.index("<bos>")
    assert all(name == "<pad>" for name in names[:start])
    assert "<pad>" not in names[start:]
    assert all(p >= start for p in scored)
    return names[start:], {p - start for p in scored}, start


def each_length(task, n=1, seed=0, lengths=None):
    rng = np.random.default_rng(seed)
    for length in lengths or range(task.min_length, MAX_LENGTH + 1):
        batch = task.batch(n, length, rng)
        assert batch.tokens.shape == batch.targets.shape == (n, length)
        assert batch.tokens.dtype == batch.targets.dtype == np.int64
        for names, scored in sequences(task, batch):
            assert len(names) == length + 1
            names, scored, pad = strip_padding(names, scored)
            yield length, names, scored, pad


# ------------------------------------------------------------- each task


@pytest.mark.parametrize("cls", [tasks.Copy, tasks.Reverse])
def test_copy_and_reverse_answer_the_input_forwards_and_backwards(cls):
    task = cls(n_symbols=5)
    for length, names, scored, pad in each_length(task):
        k = (length - 1) // 2
        assert pad == length + 1 - (2 * k + 2) <= 1
        assert names[0] == "<bos>" and names[k + 1] == "|"
        source, answer = names[1 : k + 1], names[k + 2 :]
        assert set(source) <= set("abcde")
        assert answer == (source if cls is tasks.Copy else source[::-1])
        assert scored == set(range(k + 2, 2 * k + 2))


def test_counting_answers_how_often_the_query_occurs():
    task = tasks.Counting(n_symbols=3)
    for length, names, scored, pad in each_length(task):
        eq = names.index("=")
        assert names[0] == "<bos>" and names[2] == "|"
        query, symbols, digits = names[1], names[3:eq], names[eq + 1 :]
        m = len(symbols)
        # the largest m that fits, its count written in len(str(m)) digits
        assert len(digits) == len(str(m))
        assert 4 + m + len(digits) == length + 1 - pad
        assert 4 + (m + 1) + len(str(m + 1)) > length + 1
        assert int("".join(digits)) == symbols.count(query)
        assert scored == set(range(eq + 1, len(names)))


@pytest.mark.parametrize("n_tokens", [None, 4])
def test_selective_copy_answers_the_data_tokens_in_order(n_tokens):
    task = tasks.SelectiveCopy(n_symbols=6, n_tokens=n_tokens)
    assert task.min_length == (3 if n_tokens is None else 9)
    for length, names, scored, pad in each_length(task):
        assert pad == 0
        sep = names.index("|")
        region, answer = names[1:sep], names[sep + 1 :]
        data = [name for name in region if name != "."]
        assert answer == data
        k = len(answer)
        assert k == (n_tokens or max(1, int((length - 1) * 0.25 // 1.25)))
        assert len(region) == length - 1 - k >= k
        assert scored == set(range(sep + 1, len(names)))


@pytest.mark.parametrize("p_ignore", ["train", "sparse", "dense", 0.5])
def test_flip_flop_reads_return_the_last_written_bit(p_ignore):
    task = tasks.FlipFlop(p_ignore)
    for length, names, scored, pad in each_length(task):
        assert pad == length % 2
        ops, bits = names[1::2], names[2::2]
        assert len(ops) == len(bits) == length // 2
        assert ops[0] == "w" and ops[-1] == "r"
        assert set(ops) <= {"w", "i", "r"} and set(bits) <= {"0", "1"}
        memory = None
        reads = set()
        for j, (op, bit) in enumerate(zip(ops, bits)):
            if op == "w":
                memory = bit
            elif op == "r":
                assert bit == memory
                reads.add(2 + 2 * j)
        assert scored == reads


def test_flip_flop_variants_draw_ignores_at_their_rate():
    rng = np.random.default_rng(5)
    for name, p in tasks.FLIP_FLOP_VARIANTS.items():
        task = tasks.FlipFlop(name)
        assert task.p_ignore == p
        tokens = task.batch(64, 512, rng).tokens
        ops = tokens[:, 1::2][:, 1:-1]  # the instructions drawn (not the first write)
        rate = np.mean(ops == task.token_names.index("i"))
        assert abs(rate - p) < 0.01, (name, rate)
        writes = np.mean(ops == task.token_names.index("w"))
        assert abs(writes - (1 - p) / 2) < 0.01


@pytest.mark.parametrize("n_queries", [1, 3])
def test_associative_recall_answers_the_value_last_bound_to_the_key(n_queries):
    task = tasks.AssociativeRecall(n_keys=4, n_values=5, n_queries=n_queries)
    assert task.min_length == 2 * n_queries + 3
    rebound = 0
    for length, names, scored, pad in each_length(task):
        sep = names.index("|")
        pairs = names[1:sep]
        assert len(pairs) == 2 * ((length - 1 - 2 * n_queries) // 2)
        assert pad == length - 1 - 2 * n_queries - len(pairs)
        binding = {}
        for key, value in zip(pairs[::2], pairs[1::2]):
            assert key.startswith("k") and value.startswith("v")
            rebound += key in binding
            binding[key] = value
        queries = names[sep + 1 :]
        assert len(queries) == 2 * n_queries
        for key, value in zip(queries[::2], queries[1::2]):
            assert binding[key] == value
        assert scored == set(range(sep + 2, len(names), 2))
    assert rebound  # the long sequences rebind keys


@pytest.mark.parametrize("reverse", [True, False])
def test_addition_digits_are_the_sum_of_python_ints(reverse):
    task = tasks.Addition(reverse=reverse)
    carries = 0
    for length, names, scored, pad in each_length(task):
        d = (length - 3) // 3
        assert pad == length - 3 - 3 * d <= 2
        assert names[0] == "<bos>" and names[d + 1] == "+" and names[2 * d + 2] == "="
        a, b, c = names[1 : d + 1], names[d + 2 : 2 * d + 2], names[2 * d + 3 :]
        assert len(c) == d + 1
        if reverse:
            a, b, c = a[::-1], b[::-1], c[::-1]
        total = int("".join(a)) + int("".join(b))
        assert "".join(c) == str(total).zfill(d + 1)
        carries += total >= 10**d
        assert scored == set(range(2 * d + 3, 3 * d + 4))
    assert carries  # the final carry is exercised


def test_addition_by_hand():
    task = tasks.Addition(reverse=True)
    batch = task.batch(1, 12, np.random.default_rng(0))
    # <bos> 8 6 5 + 2 3 0 = 0 0 6 0: 568 + 32 = 600, each number read from the right
    assert task.render(batch) == "<bos> 8 6 5 + 2 3 0 = [0] [0] [6] [0]"
    assert int("865"[::-1]) + int("230"[::-1]) == int("0060"[::-1])


# -------------------------------------------------- every task, every length


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_length_is_filled_exactly_and_the_last_token_is_scored(name):
    task = TASKS[name]()
    rng = np.random.default_rng(1)
    for length in range(task.min_length, MAX_LENGTH + 1):
        batch = task.batch(3, length, rng)
        assert batch.tokens.shape == batch.targets.shape == (3, length)
        assert (batch.targets[:, -1] != IGNORE).all()
        assert 0 <= batch.tokens.min() and batch.tokens.max() < task.vocab_size
        scored = batch.targets[batch.targets != IGNORE]
        assert 0 <= scored.min() and scored.max() < task.vocab_size
        if name != "flip_flop":  # the layout is the same in every row
            scored_at = batch.targets != IGNORE
            assert (scored_at == scored_at[0]).all()
        assert (batch.tokens == task.pad_id).sum(axis=1).max() <= 2


def test_the_registry_holds_the_seven_tasks():
    assert sorted(TASKS) == sorted(
        [
            "copy",
            "reverse",
            "counting",
            "selective_copy",
            "flip_flop",
            "associative_recall",
            "addition",
        ]
    )
    for name, cls in TASKS.items():
        task = cls()
        assert task.name == name and task.pad_id == 0
        assert task.vocab_size == len(task.token_names) == len(set(task.token_names))


@pytest.mark.parametrize(
    "task",
    [cls() for cls in TASKS.values()]
    + [tasks.SelectiveCopy(n_tokens=5), tasks.AssociativeRecall(n_queries=4)],
    ids=repr,
)
def test_lengths_below_the_shortest_are_refused_naming_length(task):
    rng = np.random.default_rng(0)
    task.batch(1, task.min_length, rng)
    for length in (task.min_length - 1, 0, -3):
        with pytest.raises(ValueError, match=r"^length must be >= \d+ for the"):
            task.batch(1, length, rng)
    with pytest.raises(TypeError, match="^length must be an integer"):
        task.batch(1, 10.0, rng)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_seed_gives_the_same_batch(name):
    task = TASKS[name]()
    first = task.batch(4, 40, np.random.default_rng(123))
    again = task.batch(4, 40, np.random.default_rng(123))
    other = task.batch(4, 40, np.random.default_rng(124))
    np.testing.assert_array_equal(first.tokens, again.tokens)
    np.testing.assert_array_equal(first.targets, again.targets)
    assert not np.array_equal(first.tokens, other.tokens)
    # the caller's generator is advanced: two calls differ
    rng = np.random.default_rng(7)
    assert not np.array_equal(task.batch(4, 40, rng).tokens, task.batch(4, 40, rng).tokens)


def test_bad_arguments_name_themselves():
    task = tasks.Copy()
    with pytest.raises(TypeError, match="^rng must be a numpy Generator"):
        task.batch(1, 10, 0)
    with pytest.raises(TypeError, match="^rng must be a numpy Generator"):
        task.batch(1, 10, np.random.RandomState(0))
    with pytest.raises(ValueError, match="^n must be >= 1"):
        task.batch(0, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="^n_symbols must be >= 1"):
        tasks.Copy(n_symbols=0)
    with pytest.raises(ValueError, match="^density must be in"):
        tasks.SelectiveCopy(density=1.5)
    with pytest.raises(ValueError, match="^n_tokens must be >= 1"):
        tasks.SelectiveCopy(n_tokens=0)
    with pytest.raises(ValueError, match="^p_ignore must be a probability or one of"):
        tasks.FlipFlop("medium")
    with pytest.raises(ValueError, match=r"^p_ignore must be in \[0, 1\)"):
        tasks.FlipFlop(1.0)
    with pytest.raises(ValueError, match="^n_queries must be >= 1"):
        tasks.AssociativeRecall(n_queries=0)
    with pytest.raises(TypeError, match="^reverse must be a bool"):
        tasks.Addition(reverse="yes")


# ------------------------------------------------------------- exact match


def test_exact_match_by_hand():
    targets = np.array(
        [
            [IGNORE, IGNORE, 5, 6],
            [IGNORE, 3, IGNORE, 4],
            [7, IGNORE, IGNORE, IGNORE],
        ]
    )
    predictions = np.array(
        [
            [0, 0, 5, 6],  # right on both scored positions (the rest does not count)
            [9, 3, 9, 5],  # wrong on the last
            [7, 1, 2, 3],  # right on its one scored position
        ]
    )
    out = exact_match(predictions, targets)
    assert out.dtype == np.float64 and out.tolist() == [1.0, 0.0, 1.0]
    assert exact_match(targets.clip(0), targets).tolist() == [1.0, 1.0, 1.0]


def test_exact_match_refuses_what_it_cannot_read():
    targets = np.array([[IGNORE, 1], [IGNORE, 2]])
    with pytest.raises(ValueError, match="^predictions and targets must have the same shape"):
        exact_match(np.zeros((2, 3), dtype=int), targets)
    with pytest.raises(TypeError, match="^predictions must hold integer token ids"):
        exact_match(np.zeros((2, 2)), targets)
    with pytest.raises(ValueError, match="^predictions must be 2-D"):
        exact_match(np.zeros(2, dtype=int), targets)
    with pytest.raises(ValueError, match="^targets: row 1 has no scored position"):
        exact_match(np.zeros((2, 2), dtype=int), np.array([[IGNORE, 1], [IGNORE, IGNORE]]))


def toy_model(task, solve, seed):
    """A causal predictor: the right next token (`solve` of the prefix) but
    wrong where a hash of the prefix says so, as a model that errs on some
    inputs; it reads nothing past the prefix it is given."""

    def next_token(prefix):
        out = np.empty(len(prefix), dtype=np.int64)
        for i, row in enumerate(prefix):
            right = solve(row)
            wrong = hash((seed, tuple(row.tolist()))) % 40 == 0
            out[i] = (right + 1) % task.vocab_size if wrong else right
        return out

    return next_token


def copy_solver(task, length):
    k = (length - 1) // 2

    def solve(row):
        # the token at position len(row) copies the one k + 1 before it
        source = len(row) - k - 1
        return row[source] if source >= 0 else 0

    return solve


def flip_flop_solver(task, length):
    write, bit0 = task.token_names.index("w"), task.token_names.index("0")

    def solve(row):
        ops = np.flatnonzero(row[:-1] == write)
        return row[ops[-1] + 1] if len(ops) else bit0

    return solve


@pytest.mark.parametrize(
    "task,solver", [(tasks.Copy(), copy_solver), (tasks.FlipFlop("dense"), flip_flop_solver)]
)
def test_greedy_decoding_and_teacher_forced_exact_match_agree(task, solver):
    scores = []
    for length in (9, 10, 31, 64):
        batch = task.batch(40, length, np.random.default_rng(length))
        for seed in range(3):
            model = toy_model(task, solver(task, length), seed)
            teacher_forced = np.stack(
                [model(batch.tokens[:, : t + 1]) for t in range(length)], axis=1
            )
            tf = exact_match(teacher_forced, batch.targets)
            greedy = exact_match(greedy_decode(model, batch), batch.targets)
            np.testing.assert_array_equal(tf, greedy)
            scores.append(tf)
    scores = np.concatenate(scores)
    assert 0.2 < scores.mean() < 0.95  # many rows right, many wrong


def test_greedy_decode_feeds_its_own_answers_back():
    task = tasks.Copy(n_symbols=3)
    batch = task.batch(1, 7, np.random.default_rng(0))  # <bos> x x x | y y y
    seen = []

    def always_a(prefix):
        seen.append(prefix.copy())
        return np.full(len(prefix), task.token_names.index("a"))

    preds = greedy_decode(always_a, batch)
    a = task.token_names.index("a")
    assert preds[0].tolist() == [IGNORE] * 4 + [a, a, a]
    assert seen[-1][0, -2:].tolist() == [a, a]  # its own tokens, not the true ones
    assert seen[0][0].tolist() == batch.tokens[0, :5].tolist()
    assert isinstance(batch, TaskBatch)


def test_the_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    found = finder.find(tasks, "posenc.lab.tasks", globs=vars(tasks).copy())
    assert sum(len(t.examples) for t in found) >= 15
    report = []
    for test in found:
        runner.run(test, out=report.append)
    assert not runner.summarize(verbose=False).failed, "".join(report)
