"""recipes/transfer_sweeps.py: the sweep files it writes load as `textnn sweep` reads them, both sides of a
pair get the same search and the same rows, and its paired interval and scores are right."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.metrics import matthews_corrcoef

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("transfer_sweeps", REPO / "recipes" / "transfer_sweeps.py")
transfer_sweeps = importlib.util.module_from_spec(spec)
sys.modules["transfer_sweeps"] = transfer_sweeps  # its dataclasses look their module up there
spec.loader.exec_module(transfer_sweeps)


def dry_run(*args: str) -> list[dict]:
    printed = subprocess.run([sys.executable, str(REPO / "recipes" / "transfer_sweeps.py"), "run", "OUT", "--dry-run",
                              *args], capture_output=True, text=True, check=True).stdout
    return [yaml.safe_load(part) for part in re.split(r"^# .*$", printed, flags=re.M)[1:]]


@pytest.mark.parametrize("task, pair, starts", [("sst2", "glove", []), ("cola", "glove", []),
                                                 ("sst2", "ulmfit", ["--start", "ulmfit=runs/lm"]),
                                                 ("sst2", "bert", ["--start", "bert=runs/bert"])])
def test_both_sides_get_the_same_search_rows_and_selection(task, pair, starts, tmp_path, monkeypatch):
    specs = dry_run("--task", task, "--pair", pair, "--sizes", "100", "2000", "--seeds", "1", "2", "3", "4", *starts)
    assert len(specs) == 4  # two sizes, two sides
    from textnn.sweep import load_sweep

    for size in (100, 2000):
        sides = [s for s in specs if s["name"].endswith(f"_{size}")]
        assert [s["name"].split("_")[-2] for s in sides] == ["pretrained", "scratch"]
        assert sides[0]["space"] == sides[1]["space"] and sides[0]["seeds"] == sides[1]["seeds"]
        assert sides[0]["seeds"] == ([1, 2, 3, 4] if size <= 1000 else [1, 2, 3])
        shared = [o for o in sides[0]["overrides"] if o.startswith(("data.validation_split", "data.train_subset",
                                                                   "train.max_steps", "train.precision"))]
        assert shared and all(o in sides[1]["overrides"] for o in shared)
        assert any(o.startswith("data.validation_split=") for o in shared)  # selected on validation, never dev
        for side in sides:
            side["overrides"] = [o for o in side["overrides"] if not o.startswith("model.init_from=runs/")]
            path = tmp_path / f"{side['name']}.yaml"
            path.write_text(yaml.safe_dump(side), encoding="utf-8")
            if "glove" in pair:  # the recipe's data must be there for the config to be read
                if not (REPO.parent / "shared" / "data").is_dir():
                    pytest.skip("../shared/data is absent")
                monkeypatch.chdir(REPO)
                assert load_sweep(path).seeds == side["seeds"]


def test_a_pair_that_starts_from_our_run_asks_for_it():
    found = subprocess.run([sys.executable, str(REPO / "recipes" / "transfer_sweeps.py"), "run", "OUT", "--dry-run",
                            "--pair", "ulmfit"], capture_output=True, text=True)
    assert found.returncode != 0 and "--start ulmfit=RUN" in found.stderr


def test_scores_are_accuracy_and_matthews_correlation():
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 2, 200), rng.integers(0, 2, (3, 200))
    assert np.allclose(transfer_sweeps.scores(gold, predicted, "accuracy"), 100 * (predicted == gold).mean(1))
    assert np.allclose(transfer_sweeps.scores(gold, predicted, "mcc"),
                       [100 * matthews_corrcoef(gold, row) for row in predicted])
    assert transfer_sweeps.scores(gold, np.ones((1, 200), dtype=int), "mcc")[0] == 0  # one class: 0, not NaN


def test_the_paired_interval_covers_a_real_gain_and_not_a_null_one():
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 2, 500)
    noisy = lambda right: np.where(rng.random((5, 500)) < right, gold, 1 - gold)  # noqa: E731
    better, worse = noisy(0.85), noisy(0.70)
    mean, low, high = transfer_sweeps.paired_interval(gold, better, worse, "accuracy", samples=400)
    assert 10 < mean < 20 and 0 < low < mean < high
    mean, low, high = transfer_sweeps.paired_interval(gold, noisy(0.8), noisy(0.8), "accuracy", samples=400)
    assert low < 0 < high
