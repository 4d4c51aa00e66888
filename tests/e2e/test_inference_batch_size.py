"""--batch-size on every command that runs a trained model (evaluate, predict, translate, generate, visualize),
as a user runs them: the answers do not depend on it, a bad value is one line, and the number given is the
number of examples that go into one forward pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from textnn import limits

REPO = Path(__file__).resolve().parents[2]
TRAIN = "train: {max_steps: 4, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, tensorboard: false}\n"
CONFIGS = {
    "classify": "task: classification\ndata: {format: tsv, train: train.tsv, dev: dev.tsv}\n"
                "model: {name: dan, preset: tiny}\n",
    "tag": "task: tagging\ndata: {format: conll, tag_scheme: iob1, train: ner.txt, dev: ner.txt}\n"
           "model: {name: rnn_tagger, preset: tiny}\n",
    "translate": "task: translation\ndata: {format: parallel, source: de, target: en, bpe_vocab_size: 200, train: mt, "
                 "dev: mt}\nmodel: {name: seq2seq, preset: tiny}\n",
    "gpt": "task: language_modeling\ndata: {format: text, tokenizer: char, bptt: 16, train: lm.txt, dev: lm.txt}\n"
           "model: {name: gpt, preset: tiny}\n",
}
# A translator trained a little longer writes sentences of different lengths (after 4 steps: nothing at all;
# this tiny model on 40 pairs also learns to write nothing at some seeds and rates, so it trains without
# dropout, whose random draws would otherwise decide which)
LONGER = {"translate": ["train.max_steps=0", "train.epochs=40", "train.lr=0.01", "model.dropout=0"]}
LARGE = "4096"  # more than any input here: everything in one forward pass


def textnn(*args: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=cwd, input=input,
                          capture_output=True, timeout=300, env=env)


def output(*args: str, cwd: Path) -> str:
    done = textnn(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


@pytest.fixture(scope="module", params=["1", "0"], ids=["cpu-with-bf16", "cpu-without-bf16"])
def root(request, tmp_path_factory) -> Path:
    """A trained run of each kind in runs/<kind>, and the files they read, on a CPU of each kind (as
    TEXTNN_NATIVE_BF16 makes it count: `auto` trains these runs in bf16 on the one, float32 on the other),
    for this module's tests and the commands they start."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEXTNN_NATIVE_BF16", request.param)
        yield trained_runs(tmp_path_factory)


def trained_runs(tmp_path_factory) -> Path:
    from tests.e2e.test_generate_cli import write_text
    from tests.e2e.test_tagging_cli import write_toy_ner
    from tests.e2e.test_translation_cli import write_corpus

    root = tmp_path_factory.mktemp("batch_size")
    write_sentiment_tsv(root / "train.tsv", 60, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 37, seed=2)
    write_toy_ner(root / "ner.txt", 30, seed=1)
    write_corpus(root, "mt", 40, seed=1)
    write_text(root / "lm.txt", 40, seed=1)
    for kind, config in CONFIGS.items():
        (root / f"{kind}.yaml").write_text(config + TRAIN, encoding="utf-8")
        done = textnn("train", f"{kind}.yaml", "--run-dir", f"runs/{kind}", *LONGER.get(kind, []), cwd=root)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    return root


# How far a number may move when the same examples go through in batches of another shape, by the precision
# the run computes in: float32 sums in another order (1e-6 of the value); bf16 autocast also rounds products
# to 8 bits of mantissa (2^-8 of the value) in kernels that block other shapes differently.
TOLERANCE = {"fp32": dict(rel=1e-6, abs=1e-5), "bf16": dict(rel=2 ** -8, abs=2 ** -8)}


def run_precision(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["precision_legs"][-1]["precision"]


def same_numbers(one: object, other: object, precision: str = "fp32") -> bool:
    """Equal JSON values, floats to the tolerance of the precision they were computed in."""
    if isinstance(one, dict) and isinstance(other, dict):
        return one.keys() == other.keys() and all(same_numbers(one[key], other[key], precision) for key in one)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(same_numbers(a, b, precision) for a, b in zip(one, other))
    if isinstance(one, float) or isinstance(other, float):
        return one == pytest.approx(other, **TOLERANCE[precision])
    return one == other


@pytest.mark.parametrize("kind,data", [("classify", "dev.tsv"), ("tag", "ner.txt")])
def test_predictions_and_metrics_are_the_same_one_at_a_time_and_all_at_once(root, kind, data):
    run = f"runs/{kind}"
    precision = run_precision(root / run)
    alone = output("predict", run, data, "--batch-size", "1", cwd=root).splitlines()
    together = output("predict", run, data, "--batch-size", LARGE, cwd=root).splitlines()
    assert len(alone) > 20 and len(alone) == len(together)
    for one, other in zip(alone, together):
        one, other = json.loads(one), json.loads(other)
        assert one.get("label") == other.get("label") and one.get("tags") == other.get("tags")
        assert same_numbers(one, other, precision), (one, other)
    metrics = [json.loads(output("evaluate", run, "--data", data, "--json", "--batch-size", size, "--bootstrap", "0",
                                 cwd=root)) for size in ("1", LARGE)]
    assert same_numbers(*metrics, precision), metrics


def test_greedy_translations_are_the_same_one_at_a_time_and_all_at_once(root):
    precision = run_precision(root / "runs/translate")
    alone = output("translate", "runs/translate", "mt.de", "--batch-size", "1", cwd=root)
    together = output("translate", "runs/translate", "mt.de", "--batch-size", LARGE, cwd=root)
    assert alone == together and len(alone.splitlines()) == 40
    assert len({len(line.split()) for line in alone.splitlines()}) > 1  # outputs of several lengths: padding counts
    metrics = [json.loads(output("evaluate", "runs/translate", "--data", "mt", "--json", "--batch-size", size,
                                 cwd=root)) for size in ("1", LARGE)]
    assert same_numbers(*metrics, precision), metrics


def test_a_language_model_read_in_windows_gives_the_same_perplexity_one_window_at_a_time(root):
    metrics = [json.loads(output("evaluate", "runs/gpt", "--data", "lm.txt", "--json", "--batch-size", size,
                                 cwd=root)) for size in ("1", LARGE)]
    assert same_numbers(*metrics, run_precision(root / "runs/gpt")), metrics


def test_generate_draws_its_samples_in_batches_of_the_size_given(root):
    """Sampling: N samples in batches of k are still N, repeatable by seed and batch size; a batch of at least
    N is the one batch generate draws without --batch-size."""
    args = ("generate", "runs/gpt", "--prompt", "the ", "--max-tokens", "12", "--num-samples", "5", "--seed", "7")
    batched = output(*args, "--batch-size", "2", cwd=root)
    assert batched.count("=== sample") == 5
    assert output(*args, "--batch-size", "5", cwd=root) == output(*args, cwd=root)


@pytest.mark.parametrize("command,value,expected", [
    (["evaluate", "runs/classify", "--data", "dev.tsv"], "0", "got 0, expected an integer >= 1"),
    (["predict", "runs/classify", "dev.tsv"], "-3", "got -3, expected an integer >= 1"),
    (["translate", "runs/translate", "mt.de"], "many", "got 'many', expected an integer"),
    (["generate", "runs/gpt", "--prompt", "a"], str(limits.MAX_BATCH + 1), f"<= {limits.MAX_BATCH:,}"),
    (["visualize", "runs/gpt", "--text", "a cat"], "2.5", "got '2.5', expected an integer")])
def test_a_bad_batch_size_is_one_line(root, command, value, expected):
    done = textnn(*command, "--batch-size", value, cwd=root)
    stderr = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1 and "--batch-size" in stderr and expected in stderr, stderr


def test_visualize_says_the_batch_size_changes_nothing(root):
    done = textnn("visualize", "runs/gpt", "--text", "the cat sat.", "--batch-size", "8", "--output-dir", "views",
                  cwd=root)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "note: --batch-size 8 does not apply here" in done.stderr.decode()


def count_forward_passes(monkeypatch) -> list[int]:
    """The batch size of every forward pass of the models `load_run` loads from now on."""
    from textnn import experiment

    sizes: list[int] = []
    original = experiment.load_run

    def load_and_count(*args, **kwargs):
        config, task, model = original(*args, **kwargs)
        model.register_forward_hook(lambda module, inputs, out: sizes.append(inputs[0].size(0)))
        return config, task, model

    monkeypatch.setattr(experiment, "load_run", load_and_count)
    return sizes


@pytest.mark.parametrize("size,passes", [(1, 37), (10, 4), (None, 1)])
def test_the_batch_size_is_the_number_of_examples_in_one_forward_pass(root, monkeypatch, size, passes):
    """37 lines to predict and 37 labelled examples to evaluate: batch size 1 makes 37 forward passes, 10
    makes 4, and the run's own rule (max(64, train.batch_size)) one."""
    from textnn.front import evaluate_run, predict_run

    sizes = count_forward_passes(monkeypatch)
    lines = (root / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [line.split("\t")[0] for line in lines]
    assert len(list(predict_run(root / "runs/classify", texts, batch_size=size))) == 37
    assert len(sizes) == passes and sum(sizes) == 37 and max(sizes) == (size or 37)
    sizes.clear()
    evaluate_run(root / "runs/classify", str(root / "dev.tsv"), bootstrap_samples=0, batch_size=size)
    assert len(sizes) == passes and sum(sizes) == 37


def test_a_batch_size_from_python_is_checked_as_on_the_command_line(root):
    from textnn.errors import TextnnError
    from textnn.front import predict_run

    for bad in (0, -1, 2.5, True, limits.MAX_BATCH + 1):
        with pytest.raises(TextnnError, match="--batch-size"):
            list(predict_run(root / "runs/classify", ["good"], batch_size=bad))
