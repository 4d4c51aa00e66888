"""What a user sees and types, through the real CLI: bars on a terminal wherever a command works for a
while (dev evaluation inside `train`, `predict`/`translate` over a file), one vocabulary of options
(`-q` after the command too, `evaluate RUN FILE`, `generate -o`, `compare --output-dir`), gzip on
standard input, and what `runs` and `report.md` say of a run."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e import terminal
from tests.e2e.test_first_hour import Workspace

CLASSIFIER = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv}
model: {name: bow, preset: tiny}
train: {epochs: 1, batch_size: 16, threads: 1, bootstrap_samples: 0, eval_every: 5}
"""


def on_a_terminal(ws: Workspace, *args: str) -> tuple[str, str]:
    """(stdout, stderr) of the CLI with stderr a 120-column terminal (where bars are drawn) and stdout a pipe."""
    code, out, shown = terminal.on_a_terminal([sys.executable, "-m", "textnn", *map(str, args)], cwd=ws.root,
                                              env=ws.env)
    assert code == 0, shown[-3000:]
    return out, shown


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    """A classifier run trained with dev evaluations every 5 steps (runs/clf), and its data."""
    ws = Workspace(tmp_path_factory.mktemp("users_see"))
    write_sentiment_tsv(ws.root / "train.tsv", 200, seed=1)
    write_sentiment_tsv(ws.root / "dev.tsv", 40, seed=2)
    ws.write("clf.yaml", CLASSIFIER)
    ws.ok("train", "clf.yaml", "--run-dir", "runs/clf")
    ws.write("lm.txt", "the cat sat on the mat .\nthe dog ran in the park .\n" * 20)
    ws.write("lm.yaml", "task: language_modeling\ndata: {format: text, train: lm.txt, tokenizer: char, bptt: 16}\n"
             "model: {name: rnn_lm, preset: tiny}\ntrain: {epochs: 1, batch_size: 4, max_steps: 3, progress: false}\n")
    ws.ok("train", "lm.yaml", "--run-dir", "runs/lm")
    return ws


# ------------------------------------------------------------------------------------------------ bars

def test_train_draws_a_bar_while_it_evaluates_on_dev(ws):
    _, err = on_a_terminal(ws, "train", "clf.yaml", "--run-dir", "runs/bars")
    assert "train bars:" in err
    assert re.search(r"evaluate dev: \d+ ?batch", err), err[-2000:]


def test_predict_over_a_file_draws_a_bar_on_a_terminal(ws):
    ws.write("reviews.txt", "a great film\n\nawful and dull\n" * 20)
    out, err = on_a_terminal(ws, "predict", "runs/clf", "reviews.txt")
    assert len(out.splitlines()) == 60
    assert re.search(r"predict clf: \d+ ?line", err), err
    piped = ws.ok("predict", "runs/clf", "reviews.txt")  # in a log, a quick command leaves no bar behind
    assert piped.stdout == out and "predict clf" not in piped.stderr


def test_the_first_frame_of_a_time_budget_bar_claims_no_total(ws):
    """Under train.max_minutes the steps the budget allows are unknown before the first step: the bar
    counts without a total until then, instead of showing the epochs' total as if it were the plan."""
    _, err = on_a_terminal(ws, "train", "clf.yaml", "--run-dir", "runs/budget", "train.max_minutes=5")
    frames = [frame for frame in re.split(r"[\r\n]", err) if frame.startswith("train budget:")]
    assert frames and "0/" not in frames[0] and "step" in frames[0], frames[:3]


# ------------------------------------------------------------------------------------------ vocabulary

def test_quiet_works_after_the_command_too(ws):
    trained = ws.ok("train", "clf.yaml", "-q", "--run-dir", "runs/quiet")
    assert "train quiet:" not in trained.stderr and "evaluate dev" not in trained.stderr
    before = ws.ok("-q", "evaluate", "runs/clf", "dev.tsv")
    after = ws.ok("evaluate", "runs/clf", "dev.tsv", "--quiet")
    assert after.stdout == before.stdout and "evaluate clf" not in after.stderr


def test_evaluate_takes_the_file_after_the_run_as_every_command_does(ws):
    positional = ws.ok("evaluate", "runs/clf", "dev.tsv", "--json")
    old = ws.ok("evaluate", "runs/clf", "--data", "dev.tsv", "--json")
    assert json.loads(old.stdout) == json.loads(positional.stdout)  # the older spelling, still read
    assert "--data" not in ws.ok("evaluate", "--help").stdout
    missing = ws.cli("evaluate", "runs/clf")
    assert missing.returncode == 2 and "textnn evaluate RUN FILE" in missing.stderr


def test_generate_writes_to_an_output_file(ws):
    shown = ws.ok("generate", "runs/lm", "--prompt", "the", "--max-tokens", "5", "--seed", "1").stdout
    done = ws.ok("generate", "runs/lm", "--prompt", "the", "--max-tokens", "5", "--seed", "1", "-o", "sample.txt")
    assert done.stdout == "" and (ws.root / "sample.txt").read_text(encoding="utf-8") == shown
    ws.write("prompts.txt", "the cat\nthe dog\n")
    lines = ws.ok("generate", "runs/lm", "prompts.txt", "--max-tokens", "3", "--seed", "1").stdout
    ws.ok("generate", "runs/lm", "prompts.txt", "--max-tokens", "3", "--seed", "1", "-o", "answers.jsonl")
    assert (ws.root / "answers.jsonl").read_text(encoding="utf-8") == lines


def test_compare_writes_its_runs_into_output_dir_and_still_reads_runs_dir(ws):
    new = ws.ok("compare", "clf.yaml", "--set", "train.progress=false", "--output-dir", "cmp")
    assert (ws.root / "cmp" / "clf" / "model.safetensors").is_file() and "clf" in new.stdout
    old = ws.ok("compare", "clf.yaml", "--set", "train.progress=false", "--runs-dir", "cmp")
    assert "reusing" in old.stderr or "cmp/clf" in old.stderr, old.stderr  # the older spelling: the same place


def test_explain_limits_names_the_commands_as_they_are_spelt(ws):
    text = ws.ok("explain", "limits").stdout
    assert "--file" not in text and "generate RUN FILE" in text


def test_the_report_names_the_device_the_run_used(ws):
    report = (ws.root / "runs" / "clf" / "report.md").read_text(encoding="utf-8")
    assert re.search(r"device: (cpu|cuda(:\d+)?)$", report, re.M) and "device: auto" not in report


# ------------------------------------------------------------------------------------------ gzip stdin

def test_gzip_on_standard_input_is_read_as_a_gzip_file_is(ws):
    text = "a great film\n\nawful and dull\n"
    plain = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                           input=text.encode(), capture_output=True, timeout=300)
    packed = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                            input=gzip.compress(text.encode()), capture_output=True, timeout=300)
    assert packed.returncode == 0, packed.stderr.decode()[-2000:]
    assert packed.stdout == plain.stdout and len(plain.stdout.splitlines()) == 3
    cut = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                         input=gzip.compress(text.encode() * 50)[:30], capture_output=True, timeout=300)
    assert cut.returncode == 2 and "<stdin>: not a valid gzip stream" in cut.stderr.decode()
    assert "NUL" not in cut.stderr.decode() and "Traceback" not in cut.stderr.decode()


# ------------------------------------------------------------------------------------------------ runs

def test_runs_shows_the_best_dev_score_of_a_run_killed_after_an_evaluation(ws):
    """A run that died (or was interrupted) after a dev evaluation has a best score so far: `runs` shows it,
    as it does for a finished run."""
    proc = subprocess.Popen([sys.executable, "-m", "textnn", "train", "clf.yaml", "--run-dir", "listing/killed",
                             "train.epochs=100000", "train.progress=false"],
                            cwd=ws.root, env=ws.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # killed at once after its first dev evaluation
            if line.startswith("step 5: dev"):
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    [row] = [json.loads(line) for line in ws.ok("runs", "listing", "--json").stdout.splitlines()]
    assert row["status"] == "died" and row["metric"] == "accuracy" and isinstance(row["best"], float)
    assert f"accuracy  {row['best']:.4g}" in ws.ok("runs", "listing").stdout


def test_runs_lines_up_its_columns_whatever_the_names(ws):
    import shutil

    for name in ("a", "a_much_longer_run_name_from_a_learning_rate_sweep", "実験_学習率"):
        shutil.copytree(ws.root / "runs" / "clf", ws.root / "aligned" / name)
    lines = ws.ok("runs", "aligned").stdout.splitlines()
    wide = lambda text: len(text) + sum(1 for c in text if "\u3000" <= c <= "\u9fff")  # noqa: E731
    assert len(lines) == 3 and len({wide(line[:line.index("classification")]) for line in lines}) == 1, lines
    assert len({wide(line) for line in lines}) == 1, lines


# ----------------------------------------------------------------------------------------------- plots

def test_the_loss_plot_draws_dev_once_and_translation_bleu(ws):
    from textnn.viz.plots import plot_loss_curve

    records = [json.loads(line) for line in (ws.root / "runs" / "clf" / "metrics.jsonl").read_text().splitlines()]
    assert {record["split"] for record in records} >= {"dev", "dev_final"}
    figure = plot_loss_curve(records, ws.root / "plots" / "clf.png")
    labels = [text.get_text() for axes in figure.axes for text in axes.get_legend().get_texts()]
    assert "dev loss" in labels and not any("dev_final" in label for label in labels), labels
    translation = [{"split": "train", "step": 10, "loss": 5.0}, {"split": "dev", "step": 10, "loss": 4.0,
                   "perplexity": 54.6, "bleu": 3.2, "chrf": 20.1}]
    figure = plot_loss_curve(translation, ws.root / "plots" / "mt.png")
    labels = [text.get_text() for axes in figure.axes for text in axes.get_legend().get_texts()]
    assert "dev bleu" in labels and "dev chrf" in labels, labels


def test_a_run_shorter_than_log_every_draws_a_training_curve(ws):
    """train.log_every is 50, and a run of 40 steps still has a training curve: the loss is logged at the
    powers of two before the first 50 (1, 2, ..., 32) and at the run's last step (marked `last`), and the
    report's plot draws the train line through those points, a dot on each."""
    from textnn.viz.plots import plot_loss_curve

    ws.ok("train", "clf.yaml", "--run-dir", "runs/forty", "train.batch_size=5", "train.eval_every=0")
    run = ws.root / "runs" / "forty"
    assert json.loads((run / "run.json").read_text())["steps"] == 40  # 200 examples, 5 a batch, one epoch
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["split"] == "train"]
    assert [record["step"] for record in train] == [1, 2, 4, 8, 16, 32, 40]
    assert [record.get("last", False) for record in train] == [False] * 6 + [True]
    assert all(isinstance(record["loss"], float) for record in train)
    assert "![loss curve](loss.png)" in (run / "report.md").read_text() and (run / "loss.png").is_file()

    figure = plot_loss_curve(records, ws.root / "plots" / "forty.png")  # what the report drew
    [line] = [line for line in figure.axes[0].get_lines() if line.get_label() == "train loss"]
    assert list(line.get_xdata()) == [record["step"] for record in train]
    assert list(line.get_ydata()) == [record["loss"] for record in train]
    assert line.get_marker() == "o"


def test_evaluate_heads_the_confusion_matrix_with_the_class_labels(ws):
    lines = ws.ok("evaluate", "runs/clf", "dev.tsv", "--bootstrap", "0").stdout.splitlines()
    at = lines.index("confusion matrix (rows = gold, columns = predicted):")
    assert lines[at + 1].split() == ["0", "1"] and [line.split()[0] for line in lines[at + 2:at + 4]] == ["0", "1"]


# --------------------------------------------------------------------------------------- word vectors

def test_word_vectors_are_read_once_and_not_at_all_for_a_run_that_is_refused(tmp_path):
    from tests.e2e.test_progress_cli import workspace

    folder = workspace(tmp_path / "vectors")
    ws = Workspace(folder)
    first = ws.ok("train", "c.yaml", "--run-dir", "run", "data.vectors_vocab=true")
    assert first.stderr.count("read vectors vectors.txt ...") == 1, first.stderr
    again = ws.cli("train", "c.yaml", "--run-dir", "run", "data.vectors_vocab=true")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "read vectors" not in again.stderr and "train WordPiece" not in again.stderr
