"""The comparison chart as a picture people read: a value not measured is drawn as missing (a hatched "n/a"
placeholder, never a bar at 0), the legend lies outside the axes (clear of every bar), and the figure says
which QA question set its QA bars were computed on."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from karma_dagster.metrics import comparison as cmp

MEASURED = {c: 0.5 for c in cmp.CHART_COLUMNS}


@pytest.fixture(scope="module")
def drawn():
    rows = [cmp.ComparisonRow(backbone="local", values=MEASURED),
            cmp.ComparisonRow(backbone="local-single", mode="single_agent",
                              values={**MEASURED, "mean_confidence": None, "conflict_ratio": None}),
            cmp.ComparisonRow(backbone="gpt-4o", status="NOT CONFIGURED: set OPENAI_API_KEY")]
    fig = cmp.figure(rows)
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def test_missing_values_are_hatched_na_placeholders_not_zero_bars(drawn):
    ax = drawn.axes[0]
    single = [c for c in ax.containers if c.get_label() == "local-single"]
    assert len(single) == 1 and len(single[0]) == len(cmp.CHART_COLUMNS) - 2, "only measured values as its bars"
    assert all(bar.get_height() > 0 for c in ax.containers for bar in c), "no bar drawn at 0 for a missing value"
    placeholders = [bar for c in ax.containers for bar in c if bar.get_hatch()]
    assert len(placeholders) == 2 and all(bar.get_height() < 0.1 for bar in placeholders)
    assert [t.get_text() for t in ax.texts] == ["n/a", "n/a"]


def test_the_legend_lies_outside_the_axes(drawn):
    ax = drawn.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["local", "local-single"]
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1, "the legend covers no bar"


def test_the_figure_names_its_question_set(drawn, tmp_path):
    notes = " ".join(t.get_text() for t in drawn.texts)
    assert "package's sample questions" in notes and "not the project's" in notes
    rows = [cmp.ComparisonRow(backbone="local", values=MEASURED)]
    fig = cmp.figure(rows, "the question set lab_questions.yaml")
    assert "lab_questions.yaml" in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)
    png = cmp.chart(rows, tmp_path / "c.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
