"""Byte-level BPE for language modelling: training, exact round trip, <eos> per line, saving in the run, word perplexity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import EOS, LanguageModelingTask

LINES = ["The quick brown fox jumps over the lazy dog .", "", "Naïve café owners serve crème brûlée — twice !",
         " = Valkyria Chronicles III = ", "a <unk> word and 3 @,@ 000 numbers", "日本語のテキスト also works"]


def train_text(repeat: int = 20) -> str:
    return "\n".join(LINES * repeat) + "\n"


def bpe_config(tmp_path: Path, **data) -> object:
    (tmp_path / "train.txt").write_text(train_text(), encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(LINES[::-1]) + "\n", encoding="utf-8")
    return config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": "bpe", "bpe_vocab_size": 300, "bptt": 8, **data},
        "model": {"name": "rnn_lm", "preset": "tiny"},
        "train": {"batch_size": 2, "progress": False, "device": "cpu"}}, "test")


def test_byte_level_bpe_round_trips_any_text_exactly():
    tokenizer = Tokenizer.train_bpe(LINES * 5, vocab_size=300, specials=("<pad>", "<unk>", EOS))
    assert tokenizer.vocabulary()[:3] == ["<pad>", "<unk>", EOS]
    assert len(tokenizer.vocabulary()) <= 300
    for text in LINES + ["never seen: ǅ ẞ 🙂 \t tabs", "  leading and trailing  "]:
        tokens = tokenizer(text)
        assert tokenizer.join(tokens) == text
    assert len(tokenizer("The quick brown fox")) < len("The quick brown fox")  # merges were learned
    assert tokenizer("a <unk> word")[2] == "<unk>"  # a literal special stays one token
    again = Tokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))
    assert again.tokenize_lines(LINES) == tokenizer.tokenize_lines(LINES)


def test_bpe_task_ends_lines_with_eos_and_decodes_the_file_back(tmp_path):
    task = LanguageModelingTask.from_data(bpe_config(tmp_path))
    assert task.tokenizer.kind == "bpe" and task.vocab.itos == task.tokenizer.vocabulary()
    dev_ids = task.splits["dev"].ids.tolist()
    assert dev_ids.count(task.vocab.stoi[EOS]) == len(LINES)
    assert task.decode(dev_ids) == (tmp_path / "dev.txt").read_text(encoding="utf-8")
    assert "".join(task.token_pieces(dev_ids)) == task.decode(dev_ids)
    prompt = task.encode_text("The quick brown")
    assert EOS not in task.vocab.decode(prompt) and task.decode(prompt) == "The quick brown"


def test_bpe_is_saved_in_the_run_and_rebuilt_identically(tmp_path):
    from textnn.experiment import train

    config = bpe_config(tmp_path)
    config.train.max_steps = 2
    run, _ = train(config, tmp_path / "run")
    saved = json.loads((run.path / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["kind"] == "bpe" and saved["bpe"]["model"]["type"] == "BPE"
    rebuilt = LanguageModelingTask.from_run(run.path, config)
    original = LanguageModelingTask.from_data(config)
    assert rebuilt.vocab.itos == original.vocab.itos
    assert torch.equal(rebuilt.encode_file(config.data.dev).ids, original.splits["dev"].ids)


def test_word_perplexity_divides_the_total_nll_by_the_word_level_target_count(tmp_path):
    config = bpe_config(tmp_path)
    task = LanguageModelingTask.from_data(config)
    torch.manual_seed(0)
    model = task.build_model().eval()
    metrics = task.evaluate(model, "dev")
    words_config = bpe_config(tmp_path, tokenizer="whitespace")
    word_task = LanguageModelingTask.from_data(words_config)
    assert metrics["words"] == len(word_task.splits["dev"].ids) - 1  # what a word model predicts on it
    assert metrics["tokens"] == len(task.splits["dev"].ids) - 1 > metrics["words"]
    total_nll = metrics["loss"] * metrics["tokens"]
    assert metrics["word_perplexity"] == pytest.approx(math.exp(total_nll / metrics["words"]), rel=1e-9)
    assert metrics["word_perplexity"] > metrics["perplexity"]  # more nats per word than per piece


def test_bpe_holdout_trains_merges_on_the_kept_part_only(tmp_path):
    config = bpe_config(tmp_path, holdout=0.2, dev="")
    task = LanguageModelingTask.from_data(config)
    assert task.has_split("dev") and len(task.splits["dev"].ids) > 1


def test_init_from_reads_new_text_with_the_runs_bpe_without_training_another(tmp_path, monkeypatch):
    from textnn.experiment import train
    from textnn.tasks.language_modeling import building

    config = bpe_config(tmp_path)
    config.train.max_steps = 2
    run, _ = train(config, tmp_path / "run")
    saved = json.loads((run.path / "tokenizer.json").read_text(encoding="utf-8"))
    (tmp_path / "new.txt").write_text("zyzzyva quokka zyzzyva quokka\n" * 50, encoding="utf-8")

    def no_training(*args):
        raise AssertionError("a BPE was trained")

    monkeypatch.setattr(building, "train_bpe", no_training)
    task = LanguageModelingTask.from_data(config_from_dict({
        "task": "language_modeling", "data": {"format": "text", "train": str(tmp_path / "new.txt"), "bptt": 8},
        "model": {"init_from": str(run.path)}}, "test"))
    assert task.tokenizer.to_dict() == saved
    assert task.vocab.itos == LanguageModelingTask.from_run(run.path, config).vocab.itos
    assert task.decode(task.splits["train"].ids.tolist()) == (tmp_path / "new.txt").read_text(encoding="utf-8")
    # A BPE trained on this text would read each word as one or two pieces; the run's reads many.
    assert len(task.encode_text("zyzzyva")) > 2


def test_no_held_out_text_reaches_the_bpe_trainer(tmp_path, monkeypatch):
    # Long lines first and short ones last: the final 25% of the tokens reach back into the long
    # lines, far before the final 25% of the lines. Whatever the cut, the BPE must see only what
    # precedes the dev part, and the two parts must together be the file.
    lines = [" ".join(f"w{i}x{j}" for j in range(40)) for i in range(6)] + [f"quokka zebra {i}" for i in range(14)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen: list[str] = []
    real = Tokenizer.train_bpe

    def recording(given, *args, **kwargs):
        seen.extend(given)
        return real(given, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "train_bpe", recording)
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "tokenizer": "bpe", "bpe_vocab_size": 300,
                 "bptt": 4, "holdout": 0.25, "cache": False},
        "model": {"name": "rnn_lm", "preset": "tiny"}, "train": {"batch_size": 2, "device": "cpu"}}, "test")
    task = LanguageModelingTask.from_data(config)
    held_out = task.decode(task.splits["dev"].ids.tolist())
    assert seen == lines[:15]  # 25% of 20 lines held out
    assert task.decode(task.splits["train"].ids.tolist()) == "".join(line + "\n" for line in seen)
    assert held_out == "".join(line + "\n" for line in lines[15:])


def test_a_bpe_holdout_of_every_line_is_refused(tmp_path):
    (tmp_path / "train.txt").write_text("one line\ntwo lines\n", encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "tokenizer": "bpe", "holdout": 0.9},
        "model": {"name": "rnn_lm", "preset": "tiny"}}, "test")
    with pytest.raises(TextnnError, match=r"data\.holdout=0\.9 holds out all 2 line\(s\)"):
        LanguageModelingTask.from_data(config)
