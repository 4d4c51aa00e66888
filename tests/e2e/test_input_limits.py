"""The input-size policy (textnn/limits.py) as a user meets it: an endless or huge input, or a model too
large for the machine, is refused with one line and exit 2 before anything is written; never a hang, a
traceback or a memory that fills until the kernel kills the process (docs/RELIABILITY.md, items 13, 17)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from textnn import limits

REPO = Path(__file__).resolve().parents[2]
ZERO = Path("/dev/zero")
CONFIGS = {
    "classification": "task: classification\ndata: {format: tsv, train: TRAIN, dev: train.tsv}\n"
                      "model: {name: dan, preset: tiny}\n",
    "language_modeling": "task: language_modeling\ndata: {format: text, tokenizer: whitespace, bptt: 8, train: TRAIN, "
                         "dev: train.tsv}\nmodel: {name: rnn_lm, preset: tiny}\n",
}
TRAIN = "train: {max_steps: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n"


def textnn(*args: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, input=input, capture_output=True,
                          timeout=300, env=env)


def refused(done: subprocess.CompletedProcess, *expected: str) -> str:
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and "Traceback" not in stderr, (done.returncode, stderr[-2000:])
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), stderr[-2000:]
    for text in expected:
        assert text in last, (text, last)
    return last


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("limits")
    write_sentiment_tsv(folder / "train.tsv", 40, seed=1)
    (folder / "config.yaml").write_text(CONFIGS["classification"].replace("TRAIN", "train.tsv") + TRAIN,
                                        encoding="utf-8")
    done = textnn("train", "config.yaml", "--run-dir", "run", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.skipif(not ZERO.exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_dev_zero_as_training_data_is_refused_at_once(folder, tmp_path, task):
    (tmp_path / "train.tsv").write_bytes((folder / "train.tsv").read_bytes())
    (tmp_path / "zero.yaml").write_text(CONFIGS[task].replace("TRAIN", str(ZERO)) + TRAIN, encoding="utf-8")
    refused(textnn("train", "zero.yaml", "--run-dir", "zero", cwd=tmp_path), str(ZERO), "NUL")
    assert not (tmp_path / "zero").exists()


@pytest.mark.skipif(not ZERO.exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("command", [["evaluate", "run", "--data", str(ZERO)], ["predict", "run", str(ZERO)]])
def test_dev_zero_as_an_input_file_is_refused(folder, command):
    refused(textnn(*command, cwd=folder), str(ZERO))


def test_an_endless_line_on_standard_input_stops_at_the_line_limit(folder):
    endless = b"good " * (limits.MAX_LINE_BYTES // 5 + 2)  # no line break in 64 MiB and more
    refused(textnn("predict", "run", cwd=folder, input=endless), "<stdin>:1", "64 MiB")


def test_a_pipe_is_read_as_an_input_file(folder):
    """A source that is not a regular file but ends (a pipe: `predict RUN <(command)`) is read as a file."""
    read, write = os.pipe()
    os.write(write, b"good\nbad\n")
    os.close(write)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "textnn", "predict", "run", f"/dev/fd/{read}"], cwd=folder,
                          capture_output=True, text=True, timeout=300, env=env, pass_fds=(read,))
    os.close(read)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_a_model_larger_than_the_free_memory_is_refused_with_the_estimate(folder, tmp_path):
    done = textnn("train", str(folder / "config.yaml"), "--run-dir", str(tmp_path / "big"),
                  "model.embedding_dim=100000000", cwd=folder)
    refused(done, "parameters", "GiB", "free")
    assert not (tmp_path / "big").exists()


def test_the_memory_check_counts_weights_gradients_and_two_moments():
    limits.check_training_memory(1000, available=16_000)  # 1000 x 4 bytes x 4 copies: just fits
    with pytest.raises(limits.TextnnError, match="1,001 parameters"):
        limits.check_training_memory(1001, available=16_000)


def test_explain_lists_the_limits(folder):
    done = textnn("explain", "limits", cwd=folder)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.decode()
    for name, (value, _) in limits.TABLE.items():
        assert name in shown and (value is None or f"{value:,}" in shown), (name, shown)


TAGGER = ("task: tagging\ndata: {format: conll, tag_scheme: iob1, train: TRAIN, dev: ner.txt}\n"
          "model: {name: rnn_tagger, preset: tiny}\n" + TRAIN)
TRANSLATOR = ("task: translation\ndata: {format: parallel, source: de, target: en, bpe_vocab_size: 200, train: mt, "
              "dev: mt}\nmodel: {name: seq2seq, preset: tiny}\n" + TRAIN)


def test_a_tagging_sentence_beyond_the_limit_is_refused_in_training_and_in_predict(tmp_path):
    """A sentence read whole (the CRF's table, the char encoder) of more than MAX_EXAMPLE_TOKENS tokens: one
    line naming the file and the sentence's first line, in training and in `predict` on raw text."""
    from tests.e2e.test_tagging_cli import write_toy_ner

    write_toy_ner(tmp_path / "ner.txt", 30, seed=1)
    long = "\n".join(["-DOCSTART- -X- O O", ""] + ["word NN I-NP O"] * (limits.MAX_EXAMPLE_TOKENS + 1)) + "\n"
    (tmp_path / "long.txt").write_text(long + "\n" + (tmp_path / "ner.txt").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tmp_path / "long.yaml").write_text(TAGGER.replace("TRAIN", "long.txt"), encoding="utf-8")
    refused(textnn("train", "long.yaml", "--run-dir", "long", cwd=tmp_path), "long.txt:3", "20,001 tokens")
    assert not (tmp_path / "long").exists()
    (tmp_path / "ok.yaml").write_text(TAGGER.replace("TRAIN", "ner.txt"), encoding="utf-8")
    done = textnn("train", "ok.yaml", "--run-dir", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = " ".join(["word"] * (limits.MAX_EXAMPLE_TOKENS + 1)) + "\n"
    refused(textnn("predict", "run", cwd=tmp_path, input=("Angela met Emmanuel .\n" + line).encode()),
            "<stdin>:2", "20,001 tokens")


def test_a_translation_pair_beyond_the_default_limit_is_skipped_and_counted(tmp_path):
    """Without data.max_length, a recurrent translator (no length limit of its own) skips training pairs of
    more than MAX_PAIR_TOKENS tokens on a side, and says how many, instead of allocating for them."""
    from tests.e2e.test_translation_cli import write_corpus

    prefix = write_corpus(tmp_path, "mt", 40, seed=1)
    for side, word in (("de", "hund"), ("en", "dog")):
        path = Path(f"{prefix}.{side}")
        path.write_text(path.read_text(encoding="utf-8") + " ".join([word] * 5000) + "\n", encoding="utf-8")
    (tmp_path / "mt.yaml").write_text(TRANSLATOR, encoding="utf-8")
    done = textnn("train", "mt.yaml", "--run-dir", "run", cwd=tmp_path)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr[-2000:]
    assert "skipped 1 of 41 training pairs" in stderr and f"more than {limits.MAX_PAIR_TOKENS} tokens" in stderr


@pytest.mark.parametrize("command", [["predict", "run"], ["evaluate", "run", "--data", "train.tsv"]])
def test_inference_commands_take_a_device(folder, command):
    """--device on every command that runs a trained model: cpu runs; a GPU that is not there, or a name that
    is no device, is one line before the run is read."""
    ran = textnn(*command, "--device", "cpu", cwd=folder, input=b"good\n")
    assert ran.returncode == 0, ran.stderr
    refused(textnn(*command, "--device", "gpu0", cwd=folder, input=b"good\n"), "--device", "'gpu0' is not a device")
    import torch

    if not torch.cuda.is_available():
        refused(textnn(*command, "--device", "cuda", cwd=folder, input=b"good\n"), "--device", "CUDA is not available")
