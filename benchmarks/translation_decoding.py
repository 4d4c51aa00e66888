"""Decoding speed of a translation model: beam search (K = 5) against greedy decoding, in sentences/s.

Beam search keeps K hypotheses per sentence, so every step runs the decoder on K times the rows
of greedy decoding, reorders the state and sorts K * V candidates; a sentence also stays in the
search until no live hypothesis can still enter its best ones, which may be after greedy's
output has ended. How much of the K-fold work batching hides is what this measures: both searches
decode the same sentences with the same weights, in batches of similar length (`translate_ids`,
the path `textnn translate` and `textnn evaluate` use), in this one process, and the time of each is
the median of `--repeats` passes. Printed: sentences/s of both and `ratio=<beam / greedy>`
sentences/s (below 1: beam search is slower by that factor).

The model: a trained run (`--run RUN` with `--data PREFIX`, the run's format: e.g. Multi30k val), or
by default a tiny model of `--model` trained here for `--steps` steps on a generated corpus, so that
its outputs end like a trained model's (an untrained one never stops and every output runs to
the length limit, which would flatter neither search).

    python benchmarks/translation_decoding.py                         # ~1 minute on one CPU thread
    python benchmarks/translation_decoding.py --model transformer_mt
    python benchmarks/translation_decoding.py --run runs/multi30k_transformer --data ../shared/data/multi30k/val
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import device_info  # benchmarks/machine.py

SOURCE_WORDS = "ein hund eine katze sitzt läuft auf dem der tisch rot blau zwei männer spielen ball im park".split()
TARGET_WORDS = "a dog a cat sits runs on the the table red blue two men play ball in-the park".split()


def write_corpus(folder: Path, pairs: int, seed: int) -> tuple[str, str]:
    """A learnable word-for-word 'translation' with reordered adjectives: train and dev prefixes."""
    rng = random.Random(seed)
    for name, count in (("train", pairs), ("dev", 200)):
        source, target = [], []
        for _ in range(count):
            words = [rng.randrange(len(SOURCE_WORDS)) for _ in range(rng.randint(3, 12))]
            source.append(" ".join(SOURCE_WORDS[i] for i in words))
            target.append(" ".join(TARGET_WORDS[i] for i in reversed(words)) + " .")
        (folder / f"{name}.de").write_text("\n".join(source) + "\n", encoding="utf-8")
        (folder / f"{name}.en").write_text("\n".join(target) + "\n", encoding="utf-8")
    return str(folder / "train"), str(folder / "dev")


def trained_here(args: argparse.Namespace, folder: Path):
    from textnn.experiment import load_run, train
    from textnn.resolve import config_from_dict

    train_prefix, dev_prefix = write_corpus(folder, 3000, args.seed)
    raw = {"task": "translation",
           "data": {"format": "parallel", "train": train_prefix, "dev": dev_prefix, "tokenizer": "whitespace"},
           "model": {"name": args.model, "preset": args.preset},
           "train": {"lr": 3e-3, "batch_size": 32, "max_steps": args.steps, "epochs": 100, "progress": False,
                     "device": "cpu", "bootstrap_samples": 0, "seed": args.seed}}
    config = config_from_dict(raw, "benchmark")
    config.name = "benchmark"
    train(config, folder / "run")
    _, task, model = load_run(folder / "run")
    return task, model, dev_prefix


def median_seconds(task, model, sources, decoding, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        task.translate_ids(model, sources, decoding)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="seq2seq", help="family trained here (default seq2seq)")
    parser.add_argument("--preset", default="tiny", help="its preset (default tiny)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the model trained here")
    parser.add_argument("--run", default="", help="a trained translation run instead")
    parser.add_argument("--data", default="", help="with --run: the sentences to translate (prefix or TSV)")
    parser.add_argument("--sentences", type=int, default=200, help="sentences decoded per pass (default 200)")
    parser.add_argument("--beam", type=int, default=5, help="beam size (default 5)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per search; the median is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        if args.run:
            from textnn.experiment import load_run

            if not args.data:
                sys.exit("--run needs --data: the sentences to translate")
            _, task, model = load_run(args.run)
            data = args.data
            what = f"run {args.run}"
        else:
            task, model, data = trained_here(args, Path(scratch))
            what = f"{args.model} (preset {args.preset}) trained {args.steps} steps on a generated corpus"
        from textnn.generation.decoding import DecodingConfig

        sources = task.encode_file(data).source[:args.sentences]
        greedy = task.decoding_config()
        beam = task.decoding_config(DecodingConfig.from_flags(beam=args.beam))
        task.translate_ids(model, sources[:8], greedy)  # warm-up: first-call allocations are not decoding
        greedy_s = median_seconds(task, model, sources, greedy, args.repeats)
        beam_s = median_seconds(task, model, sources, beam, args.repeats)
    print(f"device: {device_info()}")
    print(f"model: {what}; {model.num_parameters():,} parameters; {len(sources)} sentences from {data}")
    print(f"greedy: {len(sources) / greedy_s:8.1f} sentences/s   beam {args.beam}: {len(sources) / beam_s:8.1f} "
          f"sentences/s   ratio={greedy_s / beam_s:.3f} (beam / greedy sentences/s)")


if __name__ == "__main__":
    main()
