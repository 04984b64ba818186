"""The performance page's tables and plots, from a benchmark JSON.

``benchmarks/run.py --json PATH`` writes ``{"config": {...}, "rows": [...]}``,
one row per case and thread count, with the medians in milliseconds
(``posenc_ms``, ``memory_ms``, ``numpy_ms``, ``torch_ms``, ``compiled_ms``,
``jit_ms``; ``None`` where a contender was not run) and the ratios
(``vs_memory``, ``numpy_speedup``, ``torch_speedup``, ``compiled_speedup``,
``jit_speedup``).  This script writes ``_generated/performance.md`` (the
tables, one per group, and the machine they were measured on) and two plots
beside it, which docs/performance.md includes.  The docs build runs it
(docs/conf.py); by hand::

    python docs/make_performance.py [--json docs/perf-run.json] [--out docs/_generated]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = [  # (key, heading, format): a column is shown when one of its rows has a value
    ("threads", "threads", "d"),
    ("simd", "SIMD path", "s"),
    ("posenc_ms", "posenc ms", ".2f"),
    ("memory_ms", "memory floor ms", ".2f"),
    ("vs_memory", "posenc / floor", ".2fx"),
    ("numpy_speedup", "NumPy / posenc", ".1fx"),
    ("torch_speedup", "PyTorch / posenc", ".1fx"),
    ("compiled_speedup", "torch.compile / posenc", ".1fx"),
    ("jit_speedup", "jax.jit / posenc", ".1fx"),
]


def load(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "rows" not in data or "config" not in data:
        raise ValueError(f"{path}: not a benchmarks/run.py --json file (no 'config' and 'rows')")
    return data["config"], data["rows"]


def _cell(value, spec):
    if value is None:
        return "—"
    if spec.endswith("x"):  # a ratio
        return format(value, spec[:-1]) + "x"
    return format(value, spec)


def _escape(text):
    return text.replace("|", "\\|").replace("*", "\\*")


def tables(config, rows, images):
    groups = list(dict.fromkeys(r["group"] for r in rows))
    out = [
        f"Measured with posenc {config.get('posenc')} on {config.get('machine')} "
        f"({config.get('cpus')} CPUs, SIMD path {config.get('simd')}, OpenMP "
        f"{'on' if config.get('openmp') else 'off'}), NumPy {config.get('numpy')}, "
        f"PyTorch {config.get('torch') or 'not run'}, JAX {config.get('jax') or 'not run'}"
        f"{', the `--quick` sizes' if config.get('quick') else ''}: medians of a short run on a "
        "shared machine, so single figures move by up to a third between runs. The memory "
        "floor is `ndarray.fill` of the output for a generator, `np.copyto` of the same "
        "bytes for a transform, `scores += bias` for a fused add.",
        "",
    ]
    for title, name in images:
        out += [f"![{title}]({name})", ""]
    for group in groups:
        sub = [r for r in rows if r["group"] == group]
        cols = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in sub)]
        out += [f"### {group}", ""]
        out.append("| case | " + " | ".join(h for _, h, _ in cols) + " |")
        out.append("|---|" + "---:|" * len(cols))
        for r in sub:
            cells = [_cell(r.get(k), spec) for k, _, spec in cols]
            out.append(f"| {_escape(r['case'])} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def plots(rows, outdir):
    """Two figures: times against the floor, speed-ups against NumPy and PyTorch
    (each case at its faster thread count).  Returns [(title, file name)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = {}
    for r in rows:
        if r["case"] not in best or r["posenc_ms"] < best[r["case"]]["posenc_ms"]:
            best[r["case"]] = r
    cases = list(best.values())
    labels = [r["case"] if len(r["case"]) <= 72 else r["case"][:71] + "…" for r in cases]
    y = range(len(cases))
    height = max(3.0, 0.3 * len(cases) + 1.2)

    def save(fig, ax, xlabel, name):
        """The cases down the y axis, a log x axis, the legend above; written as `name`."""
        ax.set_xscale("log")
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False)
        fig.savefig(os.path.join(outdir, name), dpi=100)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8.5, height), layout="constrained")
    ax.barh([i - 0.2 for i in y], [r["posenc_ms"] for r in cases], 0.4, label="posenc")
    ax.barh([i + 0.2 for i in y], [r["memory_ms"] for r in cases], 0.4, label="memory floor")
    save(
        fig,
        ax,
        "median time, ms (log scale; each case at its faster thread count)",
        "perf_times.png",
    )

    fig, ax = plt.subplots(figsize=(8.5, height), layout="constrained")
    for offset, key, name in ((-0.2, "numpy_speedup", "NumPy"), (0.2, "torch_speedup", "PyTorch")):
        ax.barh(
            [i + offset for i in y],
            [r.get(key) or 0.0 for r in cases],
            0.4,
            label=f"{name} time / posenc time",
        )
    ax.axvline(1.0, color="black", linewidth=0.8)
    save(fig, ax, "speed-up of posenc (log scale; 1 = as fast)", "perf_speedup.png")
    return [
        ("posenc and the memory floor", "perf_times.png"),
        ("posenc against NumPy and PyTorch", "perf_speedup.png"),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=os.path.join(HERE, "perf-run.json"))
    parser.add_argument("--out", default=os.path.join(HERE, "_generated"))
    args = parser.parse_args(argv)
    config, rows = load(args.json)
    os.makedirs(args.out, exist_ok=True)
    images = plots(rows, args.out)
    with open(os.path.join(args.out, "performance.md"), "w", encoding="utf-8") as f:
        f.write(tables(config, rows, images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
