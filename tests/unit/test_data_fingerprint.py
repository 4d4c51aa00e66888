"""The data a run's resume is checked against is exactly the files its reader reads for each data path."""

from __future__ import annotations

from pathlib import Path

from textnn.resolve import config_from_dict
from textnn.runs import data_files


def files_of(data: dict, task: str = "classification", model: str = "dan") -> dict[str, list[str]]:
    config = config_from_dict({"task": task, "data": data, "model": {"name": model, "preset": "tiny"}}, "x.yaml")
    return {key: [file.name for file in files] for key, (_, files) in data_files(config).items()}


def test_a_folder_of_class_files_is_its_txt_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("pos.txt", "neg.TXT", "README.md", "sub/other.txt"):
        (tmp_path / name).write_text("a line\n", encoding="utf-8")
    assert files_of({"format": "class_files", "train": str(tmp_path)}) == {"data.train": ["neg.TXT", "pos.txt"]}


def test_a_file_is_itself_and_a_missing_one_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n", encoding="utf-8")
    assert files_of({"train": str(tmp_path / "train.tsv"), "dev": str(tmp_path / "dev.tsv")}) == {
        "data.train": ["train.tsv"]}


def test_a_parallel_prefix_is_its_two_sides(tmp_path: Path) -> None:
    for name in ("train.de", "train.en.gz", "train.fr", "train.de.orig"):
        (tmp_path / name).write_bytes(b"")
    data = {"format": "parallel", "source": "de", "target": "en", "train": str(tmp_path / "train")}
    assert files_of(data, "translation", "seq2seq") == {"data.train": ["train.de", "train.en.gz"]}
