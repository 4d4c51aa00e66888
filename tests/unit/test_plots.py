"""Plots are written as real PNG files, with the panels the records call for."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest

from textnn.errors import TextnnError
from textnn.viz.plots import plot_confusion_matrix, plot_loss_curve

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, which follows the 8-byte signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _train_records(steps=range(0, 200, 10)):
    return [{"step": s, "epoch": s // 100, "split": "train", "loss": 2.0 / (1 + s / 50)} for s in steps]


def test_train_only_loss_curve(tmp_path):
    path = tmp_path / "loss.png"
    plot_loss_curve(_train_records(), path)
    width, height = _png_size(path)
    assert path.stat().st_size > 1000
    assert width > 0 and height > 0


def test_dev_metrics_add_a_second_panel(tmp_path):
    dev = [
        {"step": s, "split": "dev", "loss": 1.5 / (1 + s / 60), "accuracy": 0.5 + s / 1000}
        for s in (50, 100, 150)
    ]
    single, double = tmp_path / "train.png", tmp_path / "train_dev.png"
    plot_loss_curve(_train_records(), single)
    plot_loss_curve(_train_records() + dev, double)
    single_width, single_height = _png_size(single)
    double_width, double_height = _png_size(double)
    assert double_height == single_height
    assert double_width == 2 * single_width  # loss panel + metrics panel


def test_dev_loss_without_metrics_stays_one_panel(tmp_path):
    dev = [{"step": 100, "split": "dev", "loss": 0.9}, {"step": 200, "split": "dev", "loss": 0.8}]
    one, two = tmp_path / "a.png", tmp_path / "b.png"
    plot_loss_curve(_train_records(), one)
    plot_loss_curve(_train_records() + dev, two)
    assert _png_size(one) == _png_size(two)
    assert one.read_bytes() != two.read_bytes()  # the dev curve is drawn


def test_loss_curve_creates_missing_folders(tmp_path):
    path = tmp_path / "runs" / "demo" / "loss.png"
    plot_loss_curve(_train_records(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize(
    "records, fragment",
    [
        ([{"step": 1, "split": "dev", "accuracy": 0.5}], "has a numeric 'loss'"),
        ([{"split": "train", "loss": 0.5}], "records[0]"),
        ([], "none of the 0 records"),
    ],
)
def test_loss_curve_errors(tmp_path, records, fragment):
    with pytest.raises(TextnnError) as info:
        plot_loss_curve(records, tmp_path / "x.png")
    assert fragment in str(info.value)
    assert not (tmp_path / "x.png").exists()


def test_confusion_matrix_png(tmp_path):
    matrix = np.array([[50, 3, 2], [4, 30, 6], [0, 0, 0]])  # an empty row must not divide by zero
    path = tmp_path / "confusion.png"
    plot_confusion_matrix(matrix, ["neg", "neu", "pos"], path, title="dev")
    width, height = _png_size(path)
    assert path.stat().st_size > 1000 and width > 0 and height > 0


def test_confusion_matrix_grows_with_classes(tmp_path):
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    plot_confusion_matrix(np.eye(3, dtype=int), list("abc"), small)
    plot_confusion_matrix(np.eye(20, dtype=int), [f"c{i}" for i in range(20)], large)
    assert _png_size(large)[0] > _png_size(small)[0]


@pytest.mark.parametrize(
    "matrix, labels, fragment",
    [
        (np.zeros((2, 3)), ["a", "b"], "shape (2, 3)"),
        (np.zeros((2, 2)), ["a"], "1 labels for a 2x2"),
    ],
)
def test_confusion_matrix_errors(tmp_path, matrix, labels, fragment):
    with pytest.raises(TextnnError) as info:
        plot_confusion_matrix(matrix, labels, tmp_path / "x.png")
    assert fragment in str(info.value)


def test_importing_plots_does_not_import_matplotlib():
    code = "import sys, textnn.viz.plots; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _series(figure) -> dict[str, dict[str, str]]:
    """Every drawn curve of every panel by its legend label: its marker and how many points it has."""
    return {line.get_label(): {"marker": line.get_marker(), "points": len(line.get_xdata())}
            for axes in figure.axes for line in axes.get_lines()}


def _legend_labels(figure) -> list[list[str]]:
    return [[text.get_text() for text in axes.get_legend().get_texts()] for axes in figure.axes]


def test_a_short_run_shows_every_point_as_a_marker_with_one_legend_entry_per_series(tmp_path):
    records = _train_records(steps=(5,)) + [{"step": 5, "split": "dev", "loss": 0.9, "accuracy": 0.6}]
    figure = plot_loss_curve(records, tmp_path / "loss.png")
    assert _series(figure) == {"train loss": {"marker": "o", "points": 1}, "dev loss": {"marker": "o", "points": 1},
                               "dev accuracy": {"marker": "o", "points": 1}}
    assert _legend_labels(figure) == [["train loss", "dev loss"], ["dev accuracy"]]


def test_a_long_training_curve_is_a_plain_line_and_its_dev_points_stay_markers(tmp_path):
    dev = [{"step": s, "split": "dev", "loss": 1.0 / (1 + s)} for s in range(0, 2000, 50)]  # 40 evaluations
    figure = plot_loss_curve(_train_records(steps=range(0, 2000, 10)) + dev, tmp_path / "loss.png")
    assert _series(figure) == {"train loss": {"marker": "None", "points": 200}, "dev loss": {"marker": "o", "points": 40}}


def test_a_comparison_names_each_run_in_its_legend_and_bars_with_intervals_where_present(tmp_path):
    from matplotlib.colors import to_rgba

    from textnn.viz.plots import ComparedRun, plot_comparison

    runs = [ComparedRun("bow", "accuracy", 0.8, 0.75, 0.85, curve=[(10, 0.6), (20, 0.8)]),
            ComparedRun("cnn", "accuracy", 0.7, curve=[(10, 0.7)])]
    path = tmp_path / "compare.png"
    figure = plot_comparison(runs, path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    curves, bars = figure.axes
    assert {line.get_label(): (line.get_marker(), len(line.get_xdata())) for line in curves.get_lines()} == {
        "bow": ("o", 2), "cnn": ("o", 1)}
    assert [text.get_text() for text in curves.get_legend().get_texts()] == ["bow", "cnn"]
    assert [label.get_text() for label in bars.get_xticklabels()] == ["bow", "cnn"]
    assert [round(patch.get_height(), 6) for patch in bars.patches] == [0.8, 0.7]
    assert [line.get_color() for line in curves.get_lines()] == ["C0", "C1"]  # each run one colour in both panels
    assert [tuple(patch.get_facecolor()) for patch in bars.patches] == [to_rgba("C0"), to_rgba("C1")]
    (error_bars,) = bars.collections  # one vertical segment per run: the interval, or none for "cnn"
    assert [tuple(np.round(segment[:, 1], 6)) for segment in error_bars.get_segments()] == [(0.75, 0.85), (0.7, 0.7)]


def test_a_comparison_without_dev_evaluations_is_bars_alone(tmp_path):
    from textnn.viz.plots import ComparedRun, plot_comparison

    figure = plot_comparison([ComparedRun("a", "f1", 0.5), ComparedRun("b", "f1", 0.6)], tmp_path / "c.png")
    (bars,) = figure.axes
    assert bars.get_legend() is None and [label.get_text() for label in bars.get_xticklabels()] == ["a", "b"]
