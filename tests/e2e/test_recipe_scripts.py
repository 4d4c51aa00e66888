"""The recipe scripts README names (recipes/run_ulmfit.sh, recipes/run_transfer_curves.sh), run as README shows
them but with `--dry-run`: each prints the commands it would run, and every `textnn train` among them loads
its config with its overrides (in this process, through textnn.resolve.load_config), each stage starting from
a stand-in of the run the command before it would write. Nothing trains, and no output folder is made.
Then the recipes' Python scripts on small made-up inputs: token_overlap.py, transfer_curves.py,
plot_curves.py and tsv_to_text.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, shared_data
from textnn.config import Config
from textnn.resolve import load_config
from textnn.training.session import train_record_due

SCRIPTS_TESTED = {"recipes/run_ulmfit.sh", "recipes/run_transfer_curves.sh",
                  "recipes/gpu/pretrain.sh"}  # the last in test_gpu_pretrain.py


def script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`bash recipes/NAME ARGS...` with this interpreter's folder first on PATH (the scripts call `python`)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", str(REPO / "recipes" / name), *args], capture_output=True, text=True,
                          env={**os.environ, "PATH": path, **(env or {})}, timeout=120)


def dry_run(name: str, *args: str, env: dict | None = None) -> list[list[str]]:
    """The commands `--dry-run` prints, each as its words."""
    done = script(name, *args, env=env)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]


def stand_in(run_dir: str | Path, config: Config) -> Path:
    """What a later stage reads of a finished run in `run_dir` to start from it: its resolved config.yaml and a
    model.safetensors (empty: configs are loaded here, weights never)."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(config.to_yaml(), encoding="utf-8")
    (run / "model.safetensors").write_bytes(b"")
    return run


def check_commands(commands: list[list[str]], out: Path) -> dict[str, Config]:
    """Load every `textnn train` command's config with its overrides, in order, leaving a stand-in of each run
    for the stages that start from it; the other commands are the repository's own Python scripts.
    Returns the loaded configs by run folder name."""
    configs = {}
    for words in commands:
        if words[:2] != ["textnn", "train"]:
            assert words[0] == "python" and (REPO / words[1]).is_file(), words
            continue
        recipe, rest = words[2], words[3:]
        assert recipe.startswith("recipes/") and (REPO / recipe).is_file(), words
        at = rest.index("--run-dir")
        run_dir, overrides = Path(rest[at + 1]), rest[:at] + rest[at + 2:]
        assert run_dir.parent == out, words  # every run goes to the OUT_DIR given
        config = load_config(REPO / recipe, overrides)
        configs[run_dir.name] = config
        stand_in(run_dir, config)
    return configs


@pytest.fixture
def at_repo(monkeypatch):
    """Recipes name their data relative to the repository root, where the scripts run."""
    monkeypatch.chdir(REPO)


def test_every_script_readme_names_is_tested_here():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"recipes/[\w./-]+\.sh", readme)) == SCRIPTS_TESTED


@pytest.mark.parametrize("task", ["sst2", "cola"])
def test_run_ulmfit_dry_run_prints_commands_whose_configs_all_load(tmp_path, at_repo, task):
    out = tmp_path / "ulmfit"
    commands = dry_run("run_ulmfit.sh", task, str(out), "--variants", "--dry-run", "train.max_steps=5")
    assert not out.exists()  # a dry run makes nothing
    configs = check_commands(commands, out)
    assert list(configs) == ["wikitext2_ulmfit_lm", f"{task}_ulmfit_lm", f"{task}_ulmfit",
                             f"{task}_ulmfit_no_unfreezing", f"{task}_ulmfit_a_only", f"{task}_ulmfit_scratch"]
    # the chain of stages: (a) -> (b) -> (c), each from the run the one before wrote
    assert configs[f"{task}_ulmfit_lm"].init_from == str(out / "wikitext2_ulmfit_lm")
    assert configs[f"{task}_ulmfit"].init_from == str(out / f"{task}_ulmfit_lm")
    assert configs[f"{task}_ulmfit_scratch"].init_from == "" and configs[f"{task}_ulmfit_no_unfreezing"].train.unfreeze == 0
    assert all(config.train.max_steps == 5 for config in configs.values())  # the extra override reaches every run
    assert commands[-1] == ["python", "recipes/results_table.py", str(out)]


def test_run_ulmfit_refuses_bad_arguments_with_its_usage(tmp_path):
    for args, words in ((["mnli"], "sst2 or cola"), (["sst2", str(tmp_path / "o"), "--dry-run", "max_steps"], "override")):
        done = script("run_ulmfit.sh", *args)
        assert done.returncode == 2 and words in done.stderr and "usage:" in done.stderr, done.stderr
        assert not (tmp_path / "o").exists()


def test_run_transfer_curves_dry_run_prints_commands_whose_configs_all_load(tmp_path, at_repo):
    shared_data("sst2", "train.tsv")  # the script sizes its runs' epochs by it
    starts = tmp_path / "starts"
    general = stand_in(starts / "wikitext2_ulmfit_lm", load_config(REPO / "recipes" / "wikitext2_ulmfit_lm.yaml"))
    env = {"SIZES": "100 all", "SEEDS": "1 2",
           "ULMFIT_LM": str(stand_in(starts / "sst2_ulmfit_lm", load_config(
               REPO / "recipes" / "sst2_ulmfit_lm.yaml", [f"model.init_from={general}"]))),
           "BERT_RUN": str(stand_in(starts / "bert", load_config(REPO / "recipes" / "wikitext2_bert_mini_pretrain.yaml"))),
           "ELMO_RUN": str(stand_in(starts / "elmo", load_config(REPO / "recipes" / "wikitext2_elmo.yaml")))}
    out = tmp_path / "transfer"
    commands = dry_run("run_transfer_curves.sh", "--dry-run", str(out), "train.max_steps=2", env=env)
    assert not out.exists()
    configs = check_commands(commands, out)
    methods = ["scratch_lstm", "ulmfit", "ulmfit_one_rate", "scratch_bert", "bert", "bilstm", "elmo", "minilm"]
    # two seeds at 100 rows, one for the whole set
    assert list(configs) == [f"{m}_100_s{seed}" for seed in (1, 2) for m in methods] + [f"{m}_all_s1" for m in methods]
    assert configs["ulmfit_100_s1"].init_from == env["ULMFIT_LM"] == configs["ulmfit_one_rate_100_s1"].init_from
    schedules = {run: (configs[run].train.unfreeze, configs[run].train.layer_lr_decay)
                 for run in ("ulmfit_100_s1", "ulmfit_one_rate_100_s1")}
    assert schedules["ulmfit_one_rate_100_s1"] == (0, 1) != schedules["ulmfit_100_s1"]
    assert configs["bert_100_s1"].init_from == env["BERT_RUN"]
    assert configs["elmo_100_s1"].data.features_from == env["ELMO_RUN"] and not configs["bilstm_100_s1"].data.features_from
    # 150 steps at 100 rows: 2 batches of 64 an epoch for the BiLSTMs, 4 of 32 for BERT
    assert configs["elmo_100_s1"].train.epochs == 75 and configs["bert_100_s1"].train.epochs == 38
    assert configs["scratch_bert_100_s1"].model.n_layers == 4
    assert all((configs[f"{m}_100_s1"].head.sentence, configs[f"{m}_100_s1"].head.pooling) == ("pooled", "mean")
               for m in ("bert", "scratch_bert"))
    assert configs["scratch_lstm_100_s1"].data.train_subset == 100 and configs["minilm_all_s1"].data.train_subset == 0
    assert all(config.train.max_steps == 2 for config in configs.values())
    assert commands[-1][:2] == ["python", "recipes/transfer_curves.py"] and commands[-1][2] == str(out)


def test_token_overlap_shows_a_negation_the_corpus_wrote_otherwise(tmp_path):
    # WikiText writes "don 't", SST-2 "do n't": under word rules 2 the task's negation never occurs in the
    # corpus; under rules 3 both are "do n't"
    corpus, task = tmp_path / "wiki.txt", tmp_path / "task.tsv"
    corpus.write_text(" i don 't think the <unk> old @-@ fashioned film works . \n", encoding="utf-8")
    task.write_text("sentence\tlabel\ni do n't like this old-fashioned film .\t0\n", encoding="utf-8")
    found = subprocess.run([sys.executable, str(REPO / "recipes" / "token_overlap.py"), str(corpus), str(task)],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    old, new = found.stdout.splitlines()
    assert old.startswith("word rules 2:") and "\"n't\" 0 times in the corpus" in old and "most frequent unseen: do, n, like, this" in old
    assert new.startswith("word rules 3:") and "\"n't\" 1 times in the corpus, 1 in the task" in new
    assert "(0.0% mark-up" in new and "most frequent unseen: like, this" in new


def test_transfer_curves_reads_several_out_dirs_a_later_one_replacing_a_method(tmp_path):
    def finished(folder: Path, run: str, accuracy: float) -> None:
        (folder / run).mkdir(parents=True)
        (folder / run / "run.json").write_text(json.dumps({"status": "finished", "dev": {"accuracy": accuracy}}))

    first, second = tmp_path / "transfer", tmp_path / "transfer_mean"
    finished(first, "scratch_bert_100_s1", 0.50)
    finished(first, "bert_100_s1", 0.40)
    finished(first, "bilstm_100_s1", 0.60)
    finished(second, "bert_100_s1", 0.55)
    finished(second, "bert_100_s2", 0.65)
    (second / "bert_100_s3").mkdir()  # unfinished: no run.json, left out
    found = subprocess.run([sys.executable, str(REPO / "recipes" / "transfer_curves.py"), str(first),
                            f"{second}=mean pooling", "--plot", str(tmp_path / "curves.png")],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in found.stdout.splitlines()[2:-1]}
    assert rows == {"BERT-Mini from scratch": "50.0 |", "BERT-Mini, our pre-training, mean pooling":
                    "60.0 (55.0-65.0, 2 seeds); +10.0 |", "BiLSTM on GloVe": "60.0 |"}
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_transfer_curves_without_plot_prints_the_table_and_writes_no_picture(tmp_path):
    folder = tmp_path / "transfer"
    (folder / "scratch_lstm_100_s1").mkdir(parents=True)
    (folder / "scratch_lstm_100_s1" / "run.json").write_text(json.dumps({"status": "finished", "dev": {"accuracy": 0.5}}))
    # run where the grid's own plot would be written (docs/img/ under the working directory)
    (tmp_path / "docs" / "img").mkdir(parents=True)
    found = subprocess.run([sys.executable, str(REPO / "recipes" / "transfer_curves.py"), str(folder)],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[-1] == "| AWD-LSTM from scratch | 50.0 |"
    assert list(tmp_path.rglob("*.png")) == []


def _run_with_epochs(folder: Path, steps_per_epoch: int, epochs: int, dev_every: int) -> Path:
    """A run folder whose metrics.jsonl logs training every 10 steps, `steps_per_epoch` steps an epoch, and
    dev accuracy every `dev_every` steps (accuracy = the step, so a point's place is easy to check)."""
    folder.mkdir(parents=True)
    records = [{"split": "train", "step": step, "epoch": (step - 1) // steps_per_epoch, "loss": 1.0, "seconds": step / 10}
               for step in range(1, steps_per_epoch * epochs + 1, 10)]
    records += [{"split": "dev", "step": step, "epoch": (step - 1) // steps_per_epoch, "accuracy": step}
                for step in range(dev_every, steps_per_epoch * epochs + 1, dev_every)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_plot_curves_puts_runs_of_different_batch_sizes_on_one_epoch_axis(tmp_path):
    # a run of 100 steps an epoch (large batches) and one of 400 (small): at equal data read, their dev
    # points must fall on the same epochs
    sys.path.insert(0, str(REPO / "recipes"))
    try:
        import plot_curves
    finally:
        sys.path.remove(str(REPO / "recipes"))
    large = _run_with_epochs(tmp_path / "large", steps_per_epoch=100, epochs=4, dev_every=100)
    small = _run_with_epochs(tmp_path / "small", steps_per_epoch=400, epochs=3, dev_every=400)
    assert plot_curves.curve(large, "dev", "accuracy", x="epoch") == ([1.0, 2.0, 3.0, 4.0], [100, 200, 300, 400])
    assert plot_curves.curve(small, "dev", "accuracy", x="epoch") == ([1.0, 2.0, 3.0], [400, 800, 1200])
    assert plot_curves.curve(small, "dev", "accuracy", x="step")[0] == [400, 800, 1200]
    short = _run_with_epochs(tmp_path / "short", steps_per_epoch=400, epochs=1, dev_every=200)
    assert plot_curves.curve(short, "dev", "accuracy", x="epoch") == ([], [])  # one epoch: no way to size it
    # as the trainer logs: every 50 steps, and before that at steps 1, 2, 4, ..., 32 (the first epoch only)
    logged = [r for r in (json.loads(line) for line in (large / "metrics.jsonl").read_text().splitlines())
              if r["split"] == "dev"]
    logged += [{"split": "train", "step": step, "epoch": (step - 1) // 100, "loss": 1.0, "seconds": step / 10}
               for step in range(1, 401) if train_record_due(step, 50)]
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logged))
    assert plot_curves.steps_per_epoch(logged) == 100
    assert plot_curves.curve(tmp_path / "trainer", "dev", "accuracy", x="epoch") == ([1.0, 2.0, 3.0, 4.0],
                                                                                      [100, 200, 300, 400])

    found = subprocess.run([sys.executable, str(REPO / "recipes" / "plot_curves.py"), str(tmp_path),
                            str(tmp_path / "curves.png"), "--metric", "accuracy", "--x", "epoch",
                            "--runs", "large=batch 128", "small", "short"], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == ["short: left out, its records hold fewer than two epochs",
                                         f"wrote {tmp_path / 'curves.png'}"]
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_tsv_to_text_writes_a_column_with_a_seeded_heldout_share(tmp_path):
    rows = [f"sentence {i} , not a label" for i in range(20)]
    tsv = tmp_path / "task.tsv"
    tsv.write_text("label\tsentence\n" + "".join(f"{i % 2}\t{row}\n" for i, row in enumerate(rows)), encoding="utf-8")

    def split(out: str, *args: str) -> tuple[list[str], list[str]]:
        done = subprocess.run([sys.executable, str(REPO / "recipes" / "tsv_to_text.py"), str(tsv), str(tmp_path / out),
                               *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        dev = tmp_path / out / "dev.txt"
        return ((tmp_path / out / "train.txt").read_text(encoding="utf-8").splitlines(),
                dev.read_text(encoding="utf-8").splitlines() if dev.exists() else [])

    assert split("all") == (rows, [])  # the column alone, in file order, no labels
    train, dev = split("a", "--heldout", "5", "--seed", "3")
    assert len(dev) == 5 and sorted(train + dev) == sorted(rows) and not set(train) & set(dev)
    assert split("b", "--heldout", "5", "--seed", "3") == (train, dev)  # the same seed, the same rows
    assert split("c", "--heldout", "5", "--seed", "4")[1] != dev
    missing = subprocess.run([sys.executable, str(REPO / "recipes" / "tsv_to_text.py"), str(tsv), str(tmp_path / "d"),
                              "--column", "text"], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "no column 'text'" in missing.stderr and not (tmp_path / "d").exists()


def test_tsv_to_text_holds_out_whole_rows_that_the_training_share_does_not_hold(tmp_path):
    """As in SST-2, most rows are phrases of longer rows: a row drawn at random would mostly be readable, word
    for word, inside a training row. The held-out rows are rows no other row contains, and the rows inside them
    (their phrases) are left out of training."""
    sentences = ["a gorgeous , witty , seductive movie .", "the plot is a tired retread of better films .",
                 "it is a charming and often affecting journey .", "the acting is flat and the story dull .",
                 "an engrossing portrait of a family in crisis .", "nothing here is as funny as it thinks ."]
    rows = []
    for sentence in sentences:
        words = sentence.split()
        rows += [sentence, " ".join(words[1:4]), " ".join(words[:-1]), " ".join(words[2:])]
    rows += ["Gorgeous ,  WITTY", "the acting is flat", "the acting is flat"]  # another case and spacing; a row twice
    tsv = tmp_path / "task.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"{row} \t1\n" for row in rows), encoding="utf-8")

    def split(out: str, count: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "recipes" / "tsv_to_text.py"), str(tsv), str(tmp_path / out),
                               "--heldout", str(count), "--seed", "0"], capture_output=True, text=True, timeout=60)

    def inside(row: str, other: str) -> bool:  # as whole words, lower-cased, spaces normalised
        return f" {' '.join(row.lower().split())} " in f" {' '.join(other.lower().split())} "

    done = split("text", 3)
    assert done.returncode == 0, done.stderr
    train = (tmp_path / "text" / "train.txt").read_text(encoding="utf-8").splitlines()
    dev = (tmp_path / "text" / "dev.txt").read_text(encoding="utf-8").splitlines()
    assert len(dev) == 3 and {row.strip() for row in dev} <= set(sentences)
    assert not [(d, t) for d in dev for t in train if inside(d, t) or inside(t, d)]
    # the training share: every other row in file order, less the phrases of the held-out sentences
    assert train == [row + " " for row in rows if row + " " not in dev and not any(inside(row, d) for d in dev)]
    assert f"wrote {len(train)} lines" in done.stdout and f"{len(rows) - 3 - len(train)} rows" in done.stdout
    too_many = split("more", 7)  # six sentences lie in no other row
    assert too_many.returncode != 0 and "only 6 of the 27 rows" in too_many.stderr and not (tmp_path / "more").exists()
