"""`textnn compare`'s table: scores in [0, 1] read as percentages, lower-is-better metrics as they are."""

from textnn.experiment import CompareRow, format_table


def row(metric: str, value: float, ci: tuple[float, float] | None = None) -> CompareRow:
    low, high = ci if ci else (None, None)
    return CompareRow(name=f"run-{metric}", model="m", metric=metric, value=value, ci_low=low, ci_high=high,
                      higher_is_better=metric not in ("perplexity", "bpc", "loss"), parameters=1234, train_seconds=1.5, examples_per_second=10.0, run_dir="runs/x")


def test_accuracy_is_shown_as_a_percentage_with_its_interval():
    table = format_table([row("accuracy", 0.8125, (0.75, 0.875))])
    assert "accuracy 81.25" in table and "[75.0, 87.5]" in table


def test_perplexity_and_bpc_are_shown_unscaled():
    table = format_table([row("perplexity", 123.456), row("bpc", 1.5)], markdown=True)
    assert "perplexity 123.46" in table and "bpc 1.50" in table
    assert "12345.6" not in table and "150.00" not in table


def test_bleu_and_chrf_are_already_percentages():
    table = format_table([row("bleu", 31.25), row("chrf", 55.5)])
    assert "bleu 31.25" in table and "chrf 55.50" in table and "3125" not in table
