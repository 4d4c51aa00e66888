"""`--resume` goes on with the data files the run started with: a training or dev file edited in place since
(longer, shorter, or the same size with other content) is refused with one line that names the file and
what changed, and the run is left as it was; a file only touched or copied back (a new time, the same
content) resumes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_sentiment_tsv

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, keep_checkpoint: last}}
"""


def textnn(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "textnn", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def snapshot(run: Path) -> dict:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}


def test_a_resume_on_edited_data_is_refused_and_one_on_the_same_content_goes_on(tmp_path: Path) -> None:
    train = write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    dev = write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2)
    config = tmp_path / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev), encoding="utf-8")
    run = tmp_path / "run"
    first = textnn("train", str(config), "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    original = {path: Path(path).read_bytes() for path in (train, dev)}
    before = snapshot(run)

    def edited(path: str, content: bytes, what: str) -> None:
        Path(path).write_bytes(content)
        refused = textnn("train", str(config), "--run-dir", str(run), "--resume")
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"error: {path} (data.") and what in lines[0], lines[0]
        assert "model.init_from=" in lines[0]  # the way on with the new data
        assert snapshot(run) == before  # nothing written
        Path(path).write_bytes(original[path])

    text = original[train]
    edited(train, text + text.splitlines(keepends=True)[0], f"{len(text) + len(text.splitlines(True)[0]):,} bytes, "
                                                            f"were {len(text):,}")  # a line appended
    edited(train, text[:-20], f"bytes, were {len(text):,}")  # cut short
    swapped = text.replace(b"\t1", b"\t0", 1) if b"\t1" in text else text.replace(b"\t0", b"\t1", 1)
    edited(train, swapped, "the same size")  # a label corrected in place: the size is unchanged
    dev_text = original[dev]
    edited(dev, dev_text[::-1], "the same size")

    # restored above (a new modification time, the original content): the run goes on
    os.utime(train, ns=(0, 10**18))
    resumed = textnn("train", str(config), "--run-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr


def test_a_resume_whose_rebuilt_vocabulary_differs_from_the_runs_is_refused(tmp_path: Path) -> None:
    """The task rebuilds its tokenizer and vocabulary from the data on --resume; where they come out other
    than the run's own (a WordPiece trained again after the data cache was cleared can), the checkpoint's
    rows would meet other words: refused, the run's files as they were."""
    train = write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    dev = write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2)
    config = tmp_path / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev), encoding="utf-8")
    run = tmp_path / "run"
    assert textnn("train", str(config), "--run-dir", str(run)).returncode == 0
    vocab = run / "vocab.json"
    text = vocab.read_text(encoding="utf-8")
    first, second = re.findall(r'"([a-z]+)"', text)[:2]  # two words of the vocabulary change places
    vocab.write_text(text.replace(f'"{first}"', '"\0"').replace(f'"{second}"', f'"{first}"').replace('"\0"', f'"{second}"'),
                     encoding="utf-8")
    before = snapshot(run)
    refused = textnn("train", str(config), "--run-dir", str(run), "--resume")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and lines[-1].startswith(f"error: {vocab}: the vocab built from the data"), refused.stderr
    assert f"model.init_from={run}" in lines[-1]
    assert snapshot(run) == before


# A folder per split, one file per class (data.format=class_files): --resume checks the class files the reader
# reads, by name, and nothing else in the folder.
CLASS_FILES_CONFIG = """\
task: classification
data: {{format: class_files, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, keep_checkpoint: last}}
"""


def write_class_files(folder: Path, n: int, seed: int) -> Path:
    """pos.txt and neg.txt (one sentence a line) in `folder`, from the toy sentiment set."""
    lines = write_sentiment_tsv(folder.with_suffix(".tsv"), n, seed).read_text(encoding="utf-8").splitlines()[1:]
    folder.mkdir()
    for name, label in (("pos", "1"), ("neg", "0")):
        (folder / f"{name}.txt").write_text("".join(f"{line.rsplit(chr(9), 1)[0]}\n" for line in lines
                                                    if line.endswith(label)), encoding="utf-8")
    return folder


def class_files_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, training folder, run) of a finished run on class files."""
    train, dev = write_class_files(tmp_path / "train", 40, seed=1), write_class_files(tmp_path / "dev", 16, seed=2)
    config = tmp_path / "dan.yaml"
    config.write_text(CLASS_FILES_CONFIG.format(train=train, dev=dev), encoding="utf-8")
    run = tmp_path / "run"
    first = textnn("train", str(config), "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    return config, train, run


def assert_refused(config: Path, run: Path, file: Path, what: str) -> None:
    """--resume stops with one line naming `file` of data.train and saying `what`, and writes nothing."""
    before = snapshot(run)
    refused = textnn("train", str(config), "--run-dir", str(run), "--resume")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert lines[0].startswith(f"error: {file} (data.train) changed since the run started: ") and what in lines[0], lines[0]
    assert f"model.init_from={run}" in lines[0]
    assert snapshot(run) == before


def test_class_files_swapped_by_renaming_are_refused(tmp_path: Path) -> None:
    """pos.txt and neg.txt swapped by three renames (`mv`), which keep each content's size and time: every
    label would be flipped."""
    config, train, run = class_files_run(tmp_path)
    (train / "pos.txt").rename(train / "tmp")
    (train / "neg.txt").rename(train / "pos.txt")
    (train / "tmp").rename(train / "neg.txt")
    assert_refused(config, run, train / "neg.txt", "bytes")


def test_class_files_renamed_are_refused(tmp_path: Path) -> None:
    config, train, run = class_files_run(tmp_path)
    (train / "pos.txt").rename(train / "positive.txt")
    assert_refused(config, run, train / "pos.txt", "it is gone (read now: neg.txt, positive.txt)")


def test_a_same_size_edit_with_its_time_put_back_is_refused(tmp_path: Path) -> None:
    """An edit that keeps the size (here the order of the sentences) with its modification time set back
    (os.utime, as `touch -d` or `cp -p` do) leaves name, size and time as they were: the status-change
    time, which nothing sets back, tells."""
    config, train, run = class_files_run(tmp_path)
    pos = train / "pos.txt"
    stat, lines = pos.stat(), pos.read_text(encoding="utf-8").splitlines(keepends=True)
    pos.write_text("".join(lines[1:] + lines[:1]), encoding="utf-8")  # the same sentences in another order
    os.utime(pos, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert pos.stat().st_size == stat.st_size and pos.stat().st_mtime_ns == stat.st_mtime_ns
    assert_refused(config, run, pos, "the same size")


def test_a_file_the_reader_ignores_beside_the_class_files_and_a_touch_resume(tmp_path: Path) -> None:
    """A README.md added beside the class files is no data of the run; nor is a new time on an unchanged file
    (`touch`, a copy): its content is hashed again, and found the same."""
    config, train, run = class_files_run(tmp_path)
    (train / "README.md").write_text("Toy sentiment data, one sentence a line.\n", encoding="utf-8")
    resumed = textnn("train", str(config), "--run-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    os.utime(train / "neg.txt", ns=(10**18, 10**18))
    resumed = textnn("train", str(config), "--run-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr


def test_a_run_with_the_earlier_fingerprint_resumes_as_before(tmp_path: Path) -> None:
    """A run started by an earlier version recorded one fingerprint for all the files under a data path
    (their number, total size, latest time and one sha256 over names and contents): it resumes on the same
    data and is refused on other data, as it was then."""
    config, train, run = class_files_run(tmp_path)
    status = json.loads((run / "run.json").read_text(encoding="utf-8"))

    def earlier(folder: Path) -> dict:
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        digest = hashlib.sha256()
        for file in files:
            digest.update(file.name.encode() + file.read_bytes())
        return {"files": len(files), "size": sum(f.stat().st_size for f in files),
                "mtime_ns": max(f.stat().st_mtime_ns for f in files), "sha256": digest.hexdigest()}

    status["data_files"] = {key: earlier(Path(folder)) for key, folder in (("data.train", train),
                                                                           ("data.dev", tmp_path / "dev"))}
    (run / "run.json").write_text(json.dumps(status), encoding="utf-8")
    resumed = textnn("train", str(config), "--run-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "run.json").read_text(encoding="utf-8"))["data_files"] == status["data_files"]
    pos = train / "pos.txt"
    pos.write_bytes(pos.read_bytes()[:-10])
    assert_refused(config, run, train, f"bytes, were {status['data_files']['data.train']['size']:,}")
