"""The CUDA paths through the real CLI, where a GPU is present (skipped elsewhere).

Training on the GPU in the precision `auto` chooses there (bf16 autocast on Ampere or later), resuming on
it, and the inference commands with `--device cuda`: their answers must agree with the same run's on the
CPU (the weights are the same; only the arithmetic differs), and a run trained on the GPU must load on a
machine without one (its files hold no CUDA tensors).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import SUBWORD_CONLL, write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def textnn(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, f"textnn {' '.join(args)}\n{done.stderr[-3000:]}"
    return done


def train(folder: Path, config: str, *overrides: str) -> subprocess.CompletedProcess:
    (folder / "run.yaml").write_text(config, encoding="utf-8")
    return textnn("train", "run.yaml", "--run-dir", "run", "train.device=cuda", *overrides, cwd=folder)


def evaluate(folder: Path, data: str, device: str) -> dict:
    return json.loads(textnn("evaluate", "run", "--data", data, "--json", "--bootstrap", "0", "--device", device,
                             cwd=folder).stdout)


CLASSIFIER = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv}
model: {name: cnn, preset: tiny}
train: {batch_size: 16, epochs: 3, lr: 0.01, progress: false, bootstrap_samples: 0}
"""


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("gpu-classifier")
    write_sentiment_tsv(folder / "train.tsv", 300, seed=1)
    write_sentiment_tsv(folder / "dev.tsv", 80, seed=2)
    done = train(folder, CLASSIFIER)
    return folder, done.stdout + done.stderr


def test_training_on_the_gpu_uses_bf16_where_it_is_native_and_says_so(classifier):
    folder, output = classifier
    expected = "precision: bf16 autocast" if torch.cuda.is_bf16_supported() else "precision: float32"
    assert expected in output
    status = json.loads((folder / "run" / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished" and status["dev"]["accuracy"] > 0.8  # the toy set is learnable


def test_a_gpu_run_evaluates_alike_on_the_gpu_and_on_the_cpu(classifier):
    folder, _ = classifier
    on_gpu, on_cpu = evaluate(folder, "dev.tsv", "cuda"), evaluate(folder, "dev.tsv", "cpu")
    # bf16 on the GPU against float32 (or the CPU's own bf16) on the CPU: a label may flip where two
    # classes are within bf16's rounding, no more than a couple of the 80.
    assert abs(on_gpu["accuracy"] - on_cpu["accuracy"]) <= 2 / 80
    assert on_gpu["loss"] == pytest.approx(on_cpu["loss"], rel=0.05, abs=0.01)


def test_a_gpu_run_holds_no_cuda_tensors_and_predicts_on_both_devices(classifier):
    folder, _ = classifier
    weights = load_file(str(folder / "run" / "model.safetensors"))
    assert weights and all(t.device.type == "cpu" for t in weights.values())
    lines = "a good and lovely film\nthe plot was dull and awful\n"
    on_gpu = [json.loads(x) for x in textnn("predict", "run", "--device", "cuda", cwd=folder, stdin=lines).stdout.splitlines()]
    on_cpu = [json.loads(x) for x in textnn("predict", "run", "--device", "cpu", cwd=folder, stdin=lines).stdout.splitlines()]
    assert [p["label"] for p in on_gpu] == [p["label"] for p in on_cpu] == ["1", "0"]


def test_resume_on_the_gpu_continues_to_the_same_step_count(tmp_path):
    write_sentiment_tsv(tmp_path / "train.tsv", 200, seed=1)
    write_sentiment_tsv(tmp_path / "dev.tsv", 40, seed=2)
    train(tmp_path, CLASSIFIER, "train.max_steps=10", "train.eval_every=10", "train.keep_checkpoint=last")
    textnn("train", "run.yaml", "--run-dir", "run", "--resume", "--extend", "train.device=cuda",
           "train.max_steps=20", "train.eval_every=10", cwd=tmp_path)
    status = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished" and status["steps"] == 20


def test_a_crf_tagger_trains_evaluates_and_predicts_on_the_gpu(tmp_path):
    sentences = SUBWORD_CONLL.split("\n\n", 1)[1]
    (tmp_path / "train.conll").write_text("-DOCSTART- -X- O O\n\n" + (sentences + "\n") * 20, encoding="utf-8")
    (tmp_path / "dev.conll").write_text(SUBWORD_CONLL, encoding="utf-8")
    train(tmp_path, "task: tagging\n"
                    "data: {format: conll, train: train.conll, dev: dev.conll}\n"
                    "model: {name: rnn_tagger, preset: tiny, char_encoder: none}\n"
                    "head: {output: crf}\n"
                    "train: {batch_size: 4, epochs: 6, lr: 0.01, progress: false, bootstrap_samples: 0}\n")
    on_gpu, on_cpu = evaluate(tmp_path, "dev.conll", "cuda"), evaluate(tmp_path, "dev.conll", "cpu")
    assert on_gpu["span_f1"] == on_cpu["span_f1"] == 1.0  # two sentences seen 20 times: no near ties
    predicted = textnn("predict", "run", "--device", "cuda", cwd=tmp_path, stdin="John Smithson visited Paris .\n")
    assert json.loads(predicted.stdout)["tags"][:2] == ["I-PER", "I-PER"]


def test_translation_on_the_gpu_decodes_as_on_the_cpu(tmp_path):
    write_corpus(tmp_path, "train", 300, seed=1)
    write_corpus(tmp_path, "dev", 30, seed=2)
    train(tmp_path, "task: translation\n"
                    "data: {format: parallel, train: train, dev: dev, source: de, target: en, bpe_vocab_size: 300}\n"
                    "model: {name: transformer_mt, preset: tiny}\n"
                    "train: {batch_size: 16, epochs: 2, lr: 0.005, metric: bleu, progress: false, precision: fp32}\n")
    sources = "\n".join((tmp_path / "dev.de").read_text(encoding="utf-8").splitlines()[:8]) + "\n"
    for flags in ([], ["--beam", "3"]):  # greedy, then beam search
        on_gpu = textnn("translate", "run", *flags, "--device", "cuda", cwd=tmp_path, stdin=sources).stdout
        on_cpu = textnn("translate", "run", *flags, "--device", "cpu", cwd=tmp_path, stdin=sources).stdout
        assert on_gpu == on_cpu and len(on_gpu.splitlines()) == 8  # float32 on both: the same argmaxes
    nbest = textnn("translate", "run", "--beam", "3", "--n-best", "2", "--device", "cuda", cwd=tmp_path,
                   stdin=sources).stdout.splitlines()
    assert len(nbest) == 8 and all(len(json.loads(line)["hypotheses"]) == 2 for line in nbest)


def test_a_language_model_generates_on_the_gpu(tmp_path):
    text = "\n".join("the cat sat on the mat and the dog ran in the park ." for _ in range(200)) + "\n"
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    (tmp_path / "dev.txt").write_text(text[:2000], encoding="utf-8")
    train(tmp_path, "task: language_modeling\n"
                    "data: {format: text, train: train.txt, dev: dev.txt, bptt: 16}\n"
                    "model: {name: gpt, preset: tiny}\n"
                    "train: {batch_size: 8, max_steps: 30, lr: 0.003, progress: false, bootstrap_samples: 0}\n")
    done = textnn("generate", "run", "--prompt", "the cat", "--max-tokens", "12", "--greedy", "--device", "cuda",
                  cwd=tmp_path)
    assert done.stdout.strip().startswith("the cat") and len(done.stdout.split()) > 3
    assert evaluate(tmp_path, "dev.txt", "cuda")["perplexity"] == pytest.approx(
        evaluate(tmp_path, "dev.txt", "cpu")["perplexity"], rel=0.02)
