"""Progress bars: one rule for training, evaluation and decoding (training/progress.py)."""

from __future__ import annotations

import torch

from textnn.training.progress import counting_batches, progress_bar


def test_counting_batches_counts_each_call_of_the_model_and_leaves_no_hook(capsys):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    with counting_batches(model, "evaluate run") as bar:
        for _ in range(5):
            model(torch.zeros(4, 3))  # the inner layers' calls are not batches
        assert bar.n == 5
    assert "evaluate run" in capsys.readouterr().err
    assert not model._forward_hooks
    model(torch.zeros(1, 3))  # no bar any more: nothing written
    assert capsys.readouterr().err == ""


def test_a_bar_that_is_off_writes_nothing(capsys):
    with progress_bar("decode", "sentence", total=10, enabled=False) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""
