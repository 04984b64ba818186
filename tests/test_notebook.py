"""posenc.probe in a notebook: a report without a name, shown as a table
(HTML and Markdown), and its plot returned as a figure.

The witnesses: the probes' protocol run directly with scikit-learn
(probe_protocol), the mean and population standard deviation of Python's
statistics module, NumPy's SVD, the paper's figures typed in here, HTML
parsed by html.parser, Markdown rendered by markdown-it-py (CommonMark with
GitHub's tables, as notebooks render it), and PNG headers read byte by byte.
"""

import io
import pickle
import statistics
import struct
from html.parser import HTMLParser

import child_process
import numpy as np
import pytest
from probe_protocol import direct_absolute, direct_order

from posenc import probe

N, D, SEEDS = 60, 8, 3
PAPER = [  # Wang & Chen (2020), Table 1: absolute MAE, order error (%)
    ("BERT", "34.14", "19.72%"),
    ("RoBERTa", "6.06", "7.23%"),
    ("GPT-2", "1.03", "1.56%"),
    ("sinusoid", "0.00", "5.08%"),
]
ODD_NAME = '<b>GPT-2</b> & "wpe" | *v2* [1](x) \\ `#`'


@pytest.fixture(scope="module")
def table():
    return np.cumsum(np.random.default_rng(5).standard_normal((N, D)), axis=0)


@pytest.fixture(scope="module")
def unnamed(table):
    return probe.report(table, seeds=SEEDS, progress=False, baselines=False)


@pytest.fixture(scope="module")
def odd(table):
    return probe.report(table, name=ODD_NAME, seeds=1, progress=False, baselines=False)


def expected_cells(E, name, seeds):
    """The table's cells, from the protocol run directly and formatted here."""
    maes = [float(np.mean(direct_absolute(E, s))) for s in range(seeds)]
    errors = [float(np.mean(direct_order(E, s))) for s in range(seeds)]
    span = "seed 0" if seeds == 1 else f"seeds 0-{seeds - 1}"
    ours = [
        f"{name} (posenc, {span})",
        f"{statistics.fmean(maes):.2f} ± {statistics.pstdev(maes):.2f}",
        f"{100 * statistics.fmean(errors):.2f}% ± {100 * statistics.pstdev(errors):.2f}%",
    ]
    return [
        ["embedding", "absolute MAE", "order error"],
        ours,
        *([f"{e} (Wang & Chen 2020)", m, r] for e, m, r in PAPER),
    ]


def ranks(E):
    s = np.linalg.svd(E, compute_uv=False)
    share = np.cumsum(s**2) / np.sum(s**2)
    return [int(np.argmax(share >= q - 1e-12)) + 1 for q in (0.9, 0.99)]


class Tables(HTMLParser):
    """The cells of every table row, the paragraphs' text and every tag seen."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.rows, self.paragraphs, self.tags = [], [], []
        self._cell = self._para = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "p":
            self._para = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "p":
            self.paragraphs.append("".join(self._para).strip())
            self._para = None

    def handle_data(self, data):
        for part in (self._cell, self._para):
            if part is not None:
                part.append(data)


def render_markdown(text):
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(text)


# ---------------------------------------------------------------- a report without a name


def test_a_report_without_a_name_calls_the_table_embedding(unnamed, table):
    assert unnamed.name == "embedding"
    assert unnamed.to_markdown().splitlines()[2].startswith("| embedding (posenc, seeds 0-2) |")
    assert str(unnamed).startswith("embedding: absolute MAE ")
    named_none = probe.report(table, name=None, seeds=1, progress=False, baselines=False)
    assert named_none.name == "embedding"


def test_a_report_name_that_is_not_a_string_or_none_is_refused(table):
    with pytest.raises(TypeError, match="name must be a string or None, not int"):
        probe.report(table, name=3, progress=False)


# ---------------------------------------------------------------- shown as a table


def test_the_html_table_holds_the_figures_of_the_protocol_and_the_paper(unnamed, table):
    parsed = Tables(unnamed._repr_html_())
    assert parsed.rows == expected_cells(table, "embedding", SEEDS)
    n90, n99 = ranks(table)
    assert parsed.paragraphs == [
        f"{N} positions x {D} dims; linear probes, 5-fold cross-validation (the paper's split), "
        f"mean ± std over {SEEDS} seeds. Informativeness: 90% of sum(s**2) in the top {n90} "
        f"components, 99% in {n99}."
    ]
    assert unnamed.to_html() == unnamed._repr_html_()


def test_the_html_table_escapes_the_name(odd, table):
    parsed = Tables(odd._repr_html_())
    assert parsed.rows[1][0] == f"{ODD_NAME} (posenc, seed 0)"
    assert parsed.rows == expected_cells(table, ODD_NAME, 1)
    assert "b" not in parsed.tags  # the name's <b> is text, not markup
    assert parsed.tags.count("tr") == 1 + 1 + len(PAPER)


def test_the_html_table_without_the_paper_has_one_row(unnamed, table):
    parsed = Tables(unnamed.to_html(published=False))
    assert parsed.rows == expected_cells(table, "embedding", SEEDS)[:2]


def test_the_markdown_a_notebook_renders_is_the_same_table(unnamed, odd, table):
    for report, name, seeds in ((unnamed, "embedding", SEEDS), (odd, ODD_NAME, 1)):
        rendered = Tables(render_markdown(report._repr_markdown_()))
        assert rendered.rows == expected_cells(table, name, seeds)
        assert "b" not in rendered.tags and "a" not in rendered.tags and "em" not in rendered.tags
        assert rendered.paragraphs == Tables(report.to_html()).paragraphs


def test_to_markdown_keeps_the_name_as_it_is_but_for_the_cell_separator(odd, table):
    text = odd.to_markdown()
    assert text.splitlines()[2].startswith(
        '| <b>GPT-2</b> & "wpe" \\| *v2* [1](x) \\ `#` (posenc, seed 0) |'
    )
    rows = Tables(render_markdown(text)).rows
    assert [len(r) for r in rows] == [3] * (2 + len(PAPER))  # the "|" did not split the cell
    assert rows[2:] == expected_cells(table, ODD_NAME, 1)[2:]
    line_break = probe.report(table, name="a\nb", seeds=1, progress=False, baselines=False)
    assert line_break.to_markdown().splitlines()[2].startswith("| a b (posenc, seed 0) |")


# ---------------------------------------------------------------- the figure


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_without_a_path_returns_a_figure_pyplot_does_not_hold(unnamed):
    from matplotlib import _pylab_helpers
    from matplotlib.figure import Figure

    managers = len(_pylab_helpers.Gcf.get_all_fig_managers())
    fig = unnamed.plot()
    assert isinstance(fig, Figure)
    assert len(_pylab_helpers.Gcf.get_all_fig_managers()) == managers
    assert fig._suptitle.get_text() == f"embedding: {N} positions x {D} dims"
    # heatmap and its colour bar, informativeness, predictions, two fold panels
    assert len(fig.axes) == 6
    assert fig.axes[0].get_images()[0].get_array().shape == (N, N)


def test_the_returned_figure_shows_itself_as_a_png_of_its_size(unnamed):
    assert png_size(unnamed.plot()._repr_png_()) == (1320, 1056)  # 12 x 9.6 in at 110 dpi
    fig = unnamed.plot(dpi=50)
    assert png_size(fig._repr_png_()) == (600, 480)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert png_size(buffer.getvalue()) == (600, 480)


def test_the_returned_figure_pickles(unnamed):
    fig = pickle.loads(pickle.dumps(unnamed.plot(dpi=40)))
    assert png_size(fig._repr_png_()) == (480, 384)


def test_plot_with_pyplot_open_leaves_its_figures_alone(unnamed):
    code = (
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
        "import numpy as np; from posenc import probe\n"
        "plt.figure()\n"
        "E = np.cumsum(np.random.default_rng(0).standard_normal((30, 4)), axis=0)\n"
        "fig = probe.report(E, seeds=1, progress=False).plot()\n"
        "print(plt.get_fignums(), plt.gcf() is fig, type(fig).__name__)\n"
    )
    out = child_process.run("-c", code, check=True)
    assert out.stdout.split("\n")[0] == "[1] False ProbeFigure"


def test_plot_without_a_path_does_not_import_pyplot():
    code = (
        "import sys, numpy as np; from posenc import probe\n"
        "E = np.cumsum(np.random.default_rng(0).standard_normal((30, 4)), axis=0)\n"
        "probe.report(E, seeds=1, progress=False).plot()._repr_png_()\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    assert child_process.run("-c", code, check=True).stdout.strip() == "False"


def test_plot_with_a_path_still_writes_the_file_and_returns_the_path(unnamed, tmp_path):
    path = tmp_path / "report.png"
    assert unnamed.plot(path) is path
    assert png_size(path.read_bytes()) == (1320, 1056)
    assert str(tmp_path / "r.pdf") == unnamed.plot(str(tmp_path / "r.pdf"))


def test_the_figure_class_is_made_only_when_a_plot_is():
    code = (
        "import sys, posenc.probe; plots = sys.modules['posenc.probe._plots']\n"
        "print(plots._FIGURE_CLASS is None, 'matplotlib' in sys.modules)\n"
    )
    assert child_process.run("-c", code, check=True).stdout.strip() == "True False"
