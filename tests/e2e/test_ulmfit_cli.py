"""ULMFiT's three stages through the CLI, with the recipes themselves on tiny files: (a) a general
AWD-LSTM language model, (b) that model fine-tuned on a classifier's own text (a TSV column), (c)
the classifier on it, for SST-2's layout and CoLA's; and the from-scratch variant's command."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import FILLER, NEGATIVE, POSITIVE, REPO, write_sentiment_tsv

RECIPES = REPO / "recipes"
TINY = ["model.preset=tiny", "data.bptt=8", "train.batch_size=4", "train.max_steps=6", "train.max_minutes=0",
        "train.threads=1"]


def cli(root: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def train(root: Path, recipe: str, run: str, *overrides) -> subprocess.CompletedProcess:
    proc = cli(root, "train", RECIPES / f"{recipe}.yaml", "--run-dir", root / run, "train.progress=false", *overrides)
    assert proc.returncode == 0, proc.stderr
    return proc


def write_text(path: Path, lines: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = FILLER + POSITIVE + NEGATIVE
    path.write_text("".join(" ".join(rng.choices(words, k=rng.randint(4, 12))) + " .\n" for _ in range(lines)),
                    encoding="utf-8")
    return path


def write_cola_tsv(path: Path, n: int, seed: int) -> Path:
    """CoLA's layout: no header; source, label, author's mark, sentence."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        words = rng.choices(FILLER, k=rng.randint(3, 7))
        rows.append(f"gj04\t{label}\t{'' if label else '*'}\t{' '.join(words if label else words[::-1]).capitalize()}.")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict:
    """Stage (a), then stage (b) on SST-2-style text: the general model and the fine-tuned one."""
    root = tmp_path_factory.mktemp("ulmfit")
    files = {"wiki": write_text(root / "wiki.txt", 300, seed=1), "wiki_dev": write_text(root / "wiki_dev.txt", 30, 2),
             "train": write_sentiment_tsv(root / "train.tsv", 120, seed=3),
             "dev": write_sentiment_tsv(root / "dev.tsv", 40, seed=4)}
    train(root, "wikitext2_ulmfit_lm", "a", f"data.train={files['wiki']}", f"data.dev={files['wiki_dev']}", *TINY)
    stage_b = train(root, "sst2_ulmfit_lm", "b", f"model.init_from={root / 'a'}", f"data.train={files['train']}",
                    f"data.dev={files['dev']}", *TINY[1:])
    return {"root": root, **files, "stage_b": stage_b}


def test_stage_b_goes_on_from_the_whole_general_model_with_its_vocabulary(ws):
    root = ws["root"]
    general = load_file(str(root / "a" / "model.safetensors"))
    assert f"loaded {len(general)} encoder and head tensors; new here: none" in ws["stage_b"].stderr
    assert (root / "b" / "vocab.json").read_text() == (root / "a" / "vocab.json").read_text()
    saved = (root / "b" / "config.yaml").read_text()
    assert "format: tsv" in saved and "text_column: sentence" in saved and "tokenizer: word" in saved
    status = json.loads((root / "b" / "run.json").read_text())
    assert status["status"] == "finished" and status["steps"] == 6 and status["dev"]["perplexity"] > 1


def test_stage_c_trains_the_ulmfit_classifier_on_the_fine_tuned_model(ws):
    root = ws["root"]
    proc = train(root, "sst2_ulmfit", "c", f"model.init_from={root / 'b'}", f"data.train={ws['train']}",
                 f"data.dev={ws['dev']}", "train.batch_size=16", "train.max_steps=8", "train.unfreeze=2",
                 "train.eval_every=4", "head.bptt=4", "train.bootstrap_samples=0", "train.threads=1")
    assert "left out: head.decoder.bias" in proc.stderr  # the language model's output layer stays behind
    assert "new here: head.net.0.bias, head.net.0.num_batches_tracked" in proc.stderr  # the batch norm first
    config = (root / "c" / "config.yaml").read_text()
    for line in ("pooling: concat", "batch_norm: true", "bptt: 4", "activation: relu", "unfreeze: 2"):
        assert line in config, line
    weights = load_file(str(root / "c" / "model.safetensors"))
    assert weights["head.net.2.weight"].shape == (50, 3 * 8)  # [h_T; max; mean] of the 8-wide tiny AWD-LSTM
    proc = cli(root, "evaluate", root / "c", "--data", ws["dev"], "--json")
    assert proc.returncode == 0, proc.stderr
    assert 0.0 <= json.loads(proc.stdout)["accuracy"] <= 1.0


def test_cola_stages_b_and_c_read_the_headless_tsv(ws):
    root = ws["root"]
    cola = {split: write_cola_tsv(root / f"cola_{split}.tsv", n, seed) for split, n, seed in
            (("train", 80, 5), ("dev", 30, 6))}
    data = [f"data.train={cola['train']}", f"data.dev={cola['dev']}"]
    train(root, "cola_ulmfit_lm", "cola_b", f"model.init_from={root / 'a'}", *data, *TINY[1:])
    train(root, "cola_ulmfit", "cola_c", f"model.init_from={root / 'cola_b'}", *data, "train.batch_size=16",
          "train.epochs=2", "train.bootstrap_samples=0", "train.threads=1")
    status = json.loads((root / "cola_c" / "run.json").read_text())
    assert status["metric"] == "mcc" and -1.0 <= status["dev"]["mcc"] <= 1.0


def test_the_from_scratch_variant_is_the_same_recipe_without_a_starting_run(ws):
    root = ws["root"]
    train(root, "sst2_ulmfit", "scratch", "model.init_from=", "model.name=awd_lstm", "model.preset=tiny",
          "data.tokenizer=word", "data.lowercase=true", "train.unfreeze=0", "train.layer_lr_decay=1",
          f"data.train={ws['train']}", f"data.dev={ws['dev']}", "train.batch_size=16", "train.max_steps=4",
          "train.bootstrap_samples=0", "train.threads=1")
    config = (root / "scratch" / "config.yaml").read_text()
    assert "init_from" not in config and "name: awd_lstm" in config
    vocab = json.loads((root / "scratch" / "vocab.json").read_text())["tokens"]
    assert "tedious" in vocab and "." not in vocab  # its own vocabulary, from the classifier's text
