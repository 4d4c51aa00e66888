"""A run selects on one set and reports on another: with data.validation_split (a seeded share of train,
recorded in the run) or data.validation (a file), the kept weights, early stopping and the best so far come
from `validation` evaluations, and dev is evaluated once, at the end, on the kept weights. A run without
either option selects on dev, as it always did, and says so in its report."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}{extra}}}
model: {{name: dan, preset: tiny}}
train: {{epochs: 3, batch_size: 16, eval_every: 5, lr: 0.01, threads: 1, progress: false, bootstrap_samples: 0,
         keep_checkpoint: last}}
"""


def textnn(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "textnn", *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert (proc.returncode == 0) == ok, proc.stderr
    return proc


def train(root: Path, name: str, extra: str = "", *overrides: str) -> Path:
    config = root / f"{name}.yaml"
    config.write_text(CONFIG.format(train=root / "train.tsv", dev=root / "dev.tsv", extra=extra), encoding="utf-8")
    textnn("train", str(config), "--run-dir", str(root / name), *overrides)
    return root / name


def records(run: Path, split: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == split]


def status(run: Path) -> dict:
    return json.loads((run / "run.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("protocol")
    write_sentiment_tsv(root / "train.tsv", 300, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 80, seed=2)
    return root


def test_a_validation_split_is_seeded_recorded_selected_on_and_dev_is_evaluated_once(root: Path) -> None:
    run = train(root, "split", ", validation_split: 0.2")
    info = status(run)
    assert info["selected_on"] == "validation"
    drawn = info["validation_rows"]
    lines = json.loads((run / "validation_lines.json").read_text(encoding="utf-8"))
    assert drawn["share"] == 0.2 and drawn["seed"] == 0
    assert drawn["rows"] == len(lines) == 60 and drawn["train_rows"] == 240
    assert drawn["lines_sha256"] == hashlib.sha256(json.dumps(lines).encode()).hexdigest()[:16]
    assert len(set(lines)) == 60 and all(2 <= line <= 301 for line in lines)  # rows of train.tsv, after its header

    # selection: a validation record at each evaluation, none on dev; the kept step is validation's best
    validation = records(run, "validation")
    assert [r["step"] for r in validation] == list(range(5, 46, 5)) and records(run, "dev") == []
    assert all(r["examples"] == 60 for r in validation)
    best = max(validation, key=lambda r: r["accuracy"])  # max gives the first of equals, as the trainer keeps
    assert (info["best_step"], info["best"]) == (best["step"], best["accuracy"])

    # dev: evaluated once, on the kept weights (what `textnn evaluate` gives of model.safetensors)
    [final] = records(run, "dev_final")
    assert final["step"] == best["step"] and final["examples"] == 80
    assert info["dev"]["accuracy"] == final["accuracy"]
    evaluated = json.loads(textnn("evaluate", str(run), str(root / "dev.tsv"), "--bootstrap", "0", "--json").stdout)
    assert evaluated["accuracy"] == final["accuracy"] and evaluated["loss"] == pytest.approx(final["loss"], rel=1e-5)
    report = (run / "report.md").read_text(encoding="utf-8")
    assert f"selected on: validation (accuracy {best['accuracy']:.4f} at step {best['step']})" in report
    assert f"## dev (evaluated once, on the kept weights of step {best['step']})" in report

    # the same seed draws the same rows, another seed others
    again = train(root, "split-again", ", validation_split: 0.2")
    other = train(root, "split-seed1", ", validation_split: 0.2", "train.seed=1")
    assert json.loads((again / "validation_lines.json").read_text(encoding="utf-8")) == lines
    assert status(again)["validation_rows"] == drawn
    assert json.loads((other / "validation_lines.json").read_text(encoding="utf-8")) != lines
    assert status(other)["validation_rows"]["seed"] == 1


def test_the_kept_step_is_the_best_on_validation_not_on_dev(root: Path) -> None:
    """Validation = dev with every label flipped: the same training (data.validation changes no batch) scores
    1 - dev accuracy there, so selecting on it keeps dev's WORST step, where selecting on dev keeps its best.
    The run without a validation option selects on dev and says so."""
    dev = (root / "dev.tsv").read_text(encoding="utf-8").splitlines()
    flipped = [dev[0]] + [line[:-1] + ("0" if line.endswith("1") else "1") for line in dev[1:]]
    (root / "flipped.tsv").write_text("\n".join(flipped) + "\n", encoding="utf-8")
    on_dev = train(root, "on-dev")
    on_validation = train(root, "on-flipped", f", validation: {root / 'flipped.tsv'}")

    dev_curve = records(on_dev, "dev")
    validation_curve = records(on_validation, "validation")
    assert [r["step"] for r in dev_curve] == [r["step"] for r in validation_curve]
    for d, v in zip(dev_curve, validation_curve):  # the same weights at every evaluation
        assert v["accuracy"] == pytest.approx(1 - d["accuracy"])
    accuracies = [r["accuracy"] for r in dev_curve]
    assert max(accuracies) > min(accuracies)  # the case separates the two choices
    worst_on_dev = dev_curve[accuracies.index(min(accuracies))]["step"]
    best_on_dev = dev_curve[accuracies.index(max(accuracies))]["step"]
    assert status(on_validation)["best_step"] == worst_on_dev != best_on_dev == status(on_dev)["best_step"]
    [final] = records(on_validation, "dev_final")
    assert final["step"] == worst_on_dev and final["accuracy"] == min(accuracies)

    # no validation option: selected on dev, as before, and said so
    assert status(on_dev)["selected_on"] == "dev" and "validation_rows" not in status(on_dev)
    assert records(on_dev, "validation") == []
    assert "selected on dev" in (on_dev / "report.md").read_text(encoding="utf-8")


def test_a_resumed_run_selects_on_the_same_rows_and_refuses_other_ones(root: Path) -> None:
    run = train(root, "resumed", ", validation_split: 0.2", "train.max_steps=20")
    lines = (run / "validation_lines.json").read_bytes()
    drawn = status(run)["validation_rows"]
    config = str(root / "resumed.yaml")
    textnn("train", config, "--run-dir", str(run), "--resume", "train.max_steps=30")
    assert (run / "validation_lines.json").read_bytes() == lines and status(run)["validation_rows"] == drawn
    assert [r["step"] for r in records(run, "validation")] == [5, 10, 15, 20, 25, 30]

    (run / "validation_lines.json").write_text(json.dumps(json.loads(lines)[1:]), encoding="utf-8")
    refused = textnn("train", config, "--run-dir", str(run), "--resume", "train.max_steps=40", ok=False)
    error = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error[0].startswith(f"error: {run / 'validation_lines.json'}: "), refused.stderr


def test_a_task_that_cannot_select_on_validation_yet_refuses_the_options(tmp_path: Path) -> None:
    config = tmp_path / "lm.yaml"
    config.write_text("task: language_modeling\ndata: {format: text, train: t.txt, validation_split: 0.1}\n"
                      "model: {name: rnn_lm, preset: tiny}\n", encoding="utf-8")
    refused = textnn("train", str(config), ok=False)
    assert refused.stderr.strip() == ("error: config key data.validation_split: is not supported for task "
                                      "language_modeling yet; select on data.dev (leave data.validation_split unset)")


def test_compare_and_runs_say_what_each_run_selected_on_and_show_its_dev_number(root: Path) -> None:
    configs = []
    for name, extra in (("cmp-dev", ""), ("cmp-validation", ", validation_split: 0.2")):
        configs.append(root / f"{name}.yaml")
        configs[-1].write_text(f"name: {name}\n" + CONFIG.format(train=root / "train.tsv", dev=root / "dev.tsv",
                                                                  extra=extra), encoding="utf-8")
    folder = root / "compared"
    table = textnn("compare", *map(str, configs), "--output-dir", str(folder)).stdout.splitlines()
    assert table[0].split()[:7] == ["config", "model", "dev", "metric", "95%", "CI", "selected"]
    for name, selected_on in (("cmp-dev", "dev"), ("cmp-validation", "validation")):
        dev = status(folder / name)["dev"]["accuracy"]
        [line] = [line for line in table if line.startswith(name + " ")]
        assert line.split()[2:5] == ["accuracy", f"{100 * dev:.2f}", "-"] and line.split()[5] == selected_on

    rows = {row["name"]: row for row in map(json.loads, textnn("runs", str(folder), "--json").stdout.splitlines())}
    validation = status(folder / "cmp-validation")
    assert rows["cmp-validation"]["selected_on"] == "validation" and rows["cmp-dev"]["selected_on"] == "dev"
    assert rows["cmp-validation"]["dev"] == validation["dev"]["accuracy"]
    assert rows["cmp-validation"]["best"] == validation["best"]  # the best of the validation records
    listing = textnn("runs", str(folder)).stdout
    assert f"accuracy  {validation['best']:.4g}  on validation, dev {validation['dev']['accuracy']:.4g}" in listing
    assert "on dev" in [line for line in listing.splitlines() if line.startswith("cmp-dev ")][0]
