"""`textnn demo`: a character-level LSTM language model trained on Python's own standard library.

No download: Karpathy, Johnson & Fei-Fei (2015), "Visualizing and Understanding Recurrent
Networks", trained character LSTMs on the Linux kernel's C source; the demo does the same with the
`.py` files of the running interpreter's standard library, for a bounded time. It is one
configuration of the `language_modeling` task (model `char_lstm_lm`, preset `demo`) trained by the
ordinary `experiment.train`, then

1. reports bits per character on held-out stdlib files (every `HOLDOUT_EVERY`-th file),
2. prints a sample continuing "def " at the chosen temperature,
3. writes `cells.html`: held-out code coloured by the LSTM cells that best track string literals,
   indentation, position in the line, brackets, comments, ... (§4.2 of the paper), and `loss.png`.

Run directory layout: the usual run files (config.yaml, model.safetensors, metrics.jsonl, report.md,
loss.png) plus `corpus/{train,dev}.txt` and `cells.html`. The corpus is written before training in a
hidden staging folder beside the run (a run directory must be empty when training starts) and moved
into `corpus/` afterwards, with config.yaml's data paths updated to point there.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from textnn.errors import TextnnError
from textnn.models.rnn_lm import PRESETS, RNNLMConfig
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import language_model

TEST_DIRS = {"test", "tests", "idle_test"}  # the stdlib's own test suites are left out
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"} | TEST_DIRS
HOLDOUT_EVERY = 10  # every 10th file (in sorted path order) is held out
MAX_TRAIN_CHARS = 5_000_000  # a few MB: more than 3 minutes on 2 CPU cores can read
MIN_TRAIN_CHARS = 500_000
DEV_CHARS = 60_000  # held-out characters: enough for a stable bpc, cheap enough to evaluate often
TRACE_CHARS = 10_000  # held-out characters over which cells are correlated with text features
PROMPT = "def "

# Training settings of the demo (the model sizes are the `demo` preset of models/rnn_lm.py).
BPTT = 128
BATCH_SIZE = 32
LR = 5e-3  # Adam; higher than Karpathy et al.'s RMSProp 2e-3 because the run lasts minutes, not days
CLIP_NORM = 5.0  # Karpathy et al. 2015 clip gradients at 5


def stdlib_sources(root: str | Path | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """(relative path, text) of every `.py` file of the stdlib, sorted, and the paths skipped as not UTF-8.

    site-packages and the stdlib's test directories are not walked; symlinked folders are not followed.
    """
    root = Path(root or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise TextnnError(f"{root}: the standard library folder was not found; the demo trains on its .py files")
    files, skipped = [], []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            try:
                text = path.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                skipped.append(rel)
                continue
            except OSError:
                skipped.append(rel)
                continue
            files.append((rel, text))
    files.sort()
    if not files:
        raise TextnnError(f"{root}: no readable .py files; the demo needs the Python standard library sources")
    return files, skipped


def _file_block(rel: str, text: str) -> str:
    """A file as it appears in the corpus: a header comment naming it, its text, a blank line."""
    text = text.replace("\r\n", "\n")
    return f"# file: {rel}\n{text}{'' if text.endswith(chr(10)) else chr(10)}\n"


def _fill(blocks: list[str], limit: int) -> list[str]:
    """Blocks in a fixed random order, each taken while it fits under `limit` characters."""
    order = list(range(len(blocks)))
    random.Random(0).shuffle(order)  # fixed: the corpus is the same whatever the training seed
    chosen, total = [], 0
    for index in order:
        if total + len(blocks[index]) <= limit:
            chosen.append(index)
            total += len(blocks[index])
    return [blocks[i] for i in sorted(chosen)]


def write_corpus(folder: Path, train_chars: int, dev_chars: int = DEV_CHARS) -> dict:
    """Write train.txt and dev.txt (every HOLDOUT_EVERY-th stdlib file held out) into `folder`."""
    files, skipped = stdlib_sources()
    blocks = [_file_block(rel, text) for rel, text in files]
    dev = _fill(blocks[::HOLDOUT_EVERY], dev_chars)
    train = _fill([b for i, b in enumerate(blocks) if i % HOLDOUT_EVERY], train_chars)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.txt").write_text("".join(train), encoding="utf-8")
    (folder / "dev.txt").write_text("".join(dev), encoding="utf-8")
    return {"train": str(folder / "train.txt"), "dev": str(folder / "dev.txt"),
            "train_files": len(train), "dev_files": len(dev), "train_chars": sum(map(len, train)),
            "dev_chars": sum(map(len, dev)), "skipped_not_utf8": skipped}


def _seconds_per_step(cfg: RNNLMConfig, give_up_after: float = float("inf"), vocab_size: int = 100,
                      device: str = "cpu") -> float:
    """Time a training step of the demo model on random data (median of 3 after a warm-up step).

    Returns inf as soon as a step takes longer than `give_up_after` seconds (3x that for the warm-up).
    """
    model = language_model("char_lstm_lm", cfg, vocab_size).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    ids = torch.randint(1, vocab_size, (BATCH_SIZE, BPTT + 1), generator=torch.Generator().manual_seed(0)).to(device)
    times = []
    for step in range(4):
        start = time.perf_counter()
        logits = model(ids[:, :-1]).logits  # [B, T, V]
        F.cross_entropy(logits.reshape(-1, vocab_size), ids[:, 1:].reshape(-1)).backward()  # [B*T, V]
        optimizer.step()
        optimizer.zero_grad()
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if times[-1] > give_up_after * (3 if step == 0 else 1):
            return float("inf")
    return sorted(times[1:])[1]


def choose_threads(cfg: RNNLMConfig) -> tuple[int, float]:
    """(CPU threads, seconds per training step): torch's default thread count, or 1 when that is faster.

    On cores busy with other work, OpenMP threads wait on each other at every small matmul of the
    recurrence: a 2-thread step was measured 60x slower than a 1-thread one on a shared 2-core
    machine, while on idle cores 2 threads are faster. So both are timed and the faster one is used.
    """
    default = torch.get_num_threads()
    torch.set_num_threads(1)
    one = _seconds_per_step(cfg)
    if default == 1:
        return 1, one
    torch.set_num_threads(default)
    many = _seconds_per_step(cfg, give_up_after=1.5 * one)
    if many < one:
        return default, many
    torch.set_num_threads(1)
    return 1, one


def run_demo(minutes: float = 3.0, temperature: float = 0.8, run_dir: str | Path = "runs/demo", seed: int = 0,
             sample_chars: int = 600) -> dict:
    """Train the demo for `minutes`, print held-out bpc and a sample, write cells.html; return the numbers."""
    from textnn.experiment import load_run, train
    from textnn.files import atomic_write_text
    from textnn.generation import DecodingConfig, generate_text
    from textnn.runs import RunDir
    from textnn.viz.lstm_cells import write_cell_view

    started = time.perf_counter()
    run_path = Path(run_dir)
    if run_path.exists() and (not run_path.is_dir() or any(run_path.iterdir())):
        raise TextnnError(f"{run_path}: already exists; the demo never overwrites a run: pass another "
                          f"--run-dir or delete it")
    if not minutes > 0:
        raise TextnnError(f"--minutes must be > 0, got {minutes}")
    if not temperature >= 0:
        raise TextnnError(f"--temperature must be >= 0 (0 = greedy), got {temperature}")
    if sample_chars < 0:
        raise TextnnError(f"sample_chars must be >= 0, got {sample_chars}")

    # How many steps fit in the budget decides how often dev bpc is measured (a handful of times)
    # and how much text is worth preparing (about 1.5x what the budget can read).
    model_cfg = PRESETS["demo"].options()
    if torch.cuda.is_available():  # the trainer's device "auto" picks the GPU
        threads, step_seconds = 0, _seconds_per_step(model_cfg, device="cuda")
    else:
        threads, step_seconds = choose_threads(model_cfg)
    budget_steps = max(1, int(60 * minutes / step_seconds))
    evaluations = max(1, min(5, round(minutes * 5 / 3)))
    eval_every = max(1, budget_steps // (evaluations + 1))
    train_chars = int(min(MAX_TRAIN_CHARS, max(MIN_TRAIN_CHARS, 1.5 * budget_steps * BATCH_SIZE * BPTT)))

    config = None
    run_path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run_path.name}-corpus-", dir=run_path.parent))
    try:
        corpus = write_corpus(staging, train_chars)
        print(f"corpus: {corpus['train_files']} stdlib files for training ({corpus['train_chars']:,} characters), "
              f"{corpus['dev_files']} held out ({corpus['dev_chars']:,} characters)"
              + (f"; {len(corpus['skipped_not_utf8'])} files skipped as not UTF-8" if corpus["skipped_not_utf8"]
                 else ""), flush=True)
        raw = {
            "name": run_path.name,
            "task": "language_modeling",
            # Independent shuffled windows (stateful: false): the setting the demo preset and lr were tuned with.
            "data": {"format": "text", "train": corpus["train"], "dev": corpus["dev"], "tokenizer": "char",
                     "min_freq": 3, "bptt": BPTT, "stateful": False},
            "model": {"name": "char_lstm_lm", "preset": "demo"},
            "train": {"optimizer": "adam", "lr": LR, "batch_size": BATCH_SIZE, "epochs": 1000,
                      "max_minutes": minutes, "clip_norm": CLIP_NORM, "eval_every": eval_every,
                      "log_every": max(1, eval_every // 10), "bootstrap_samples": 0, "seed": seed,
                      "threads": threads},
        }
        config = config_from_dict(raw, "textnn demo")
        print(f"training {config.model_name} (preset demo: {model_cfg.num_layers} x {model_cfg.hidden_size} "
              f"{model_cfg.cell.upper()}) for {minutes:g} min; dev bpc every {eval_every} steps "
              f"(~{step_seconds:.2f} s/step" + (f" on {threads} CPU thread{'s' * (threads > 1)})" if threads else ")"),
              flush=True)
        run, result = train(config, run_path)
    finally:
        if run_path.is_dir():  # the run exists (finished, failed or interrupted): keep its corpus with it
            shutil.move(str(staging), str(run_path / "corpus"))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(run_path / "corpus", 0o777 & ~umask)  # mkdtemp made it private (0700)
            if config is not None and RunDir(run_path).config_file.is_file():
                config.data.train = str(run_path / "corpus" / "train.txt")
                config.data.dev = str(run_path / "corpus" / "dev.txt")
                atomic_write_text(RunDir(run_path).config_file, config.to_yaml())
        else:
            shutil.rmtree(staging, ignore_errors=True)
    corpus.update(train=config.data.train, dev=config.data.dev)

    _, task, model = load_run(run_path)
    dev = result.dev
    print(f"held-out bpc: {dev['bpc']:.3f} (bits per character on {dev['tokens']:,} characters of "
          f"{corpus['dev_files']} held-out stdlib files; {result.steps} steps in {result.train_seconds:.0f} s)")

    drawing = {"method": "sample", "temperature": temperature} if temperature > 0 else {"method": "greedy"}  # 0: argmax
    decoding = DecodingConfig(max_tokens=sample_chars, stop_at_eos=False, seed=seed, **drawing)
    text = generate_text(model, task, PROMPT, decoding).samples[0]
    print(f"\nsample (temperature {temperature:g}, prompt {PROMPT!r}):\n{'-' * 72}\n{text}\n{'-' * 72}")

    # Cells: correlate every cell's tanh(c) with the text features over held-out code.
    held_out = Path(config.data.dev).read_text(encoding="utf-8")[:TRACE_CHARS]
    held_out = held_out[:held_out.rfind("\n") + 1] or held_out
    title = f"Cells of a character LSTM trained {minutes:g} min on Python's standard library"
    view = write_cell_view(run_path, load_run(run_path), held_out, run_path / "cells.html", title=title, random_cells=2,
                           seed=seed)
    cells_html, matches = view.path, view.matches
    loss_png = run_path / "loss.png"
    if not loss_png.is_file():
        from textnn.viz.plots import plot_loss_curve

        plot_loss_curve(run.read_metrics(), loss_png)
    print("\ncells (Pearson r with a text feature over "
          f"{len(held_out):,} held-out characters):")
    for label in view.labels:
        print(f"  {label}")
    print(f"\nwrote {cells_html}\nwrote {loss_png}\nrun directory: {run_path}", flush=True)
    sys.stdout.flush()
    return {"run_dir": str(run_path), "bpc": dev["bpc"], "dev": dev, "steps": result.steps,
            "train_seconds": result.train_seconds, "wall_seconds": time.perf_counter() - started,
            "tokens_per_second": result.tokens_per_second, "stopped": result.stopped, "prompt": PROMPT,
            "sample": text, "temperature": temperature, "cells": [asdict(m) for m in matches],
            "cells_html": str(cells_html), "loss_png": str(loss_png), "corpus": corpus}
