"""word2vec speed and quality: textnn's `embeddings` task vs gensim's Word2Vec, same corpus and settings.

Both train on the same sentences (WikiText-2 train, one paragraph per line, about 2M tokens) with
word2vec's usual setting: dimension 100, window 5, 5 negatives, min_count 5, subsampling 1e-3,
5 epochs, skip-gram and CBOW, at the same number of CPU threads (gensim's worker threads, our
worker processes). Printed per (architecture, threads):

- words/s of each: corpus words x epochs / training seconds (vocabulary building and data reading
  excluded for both), and `ratio=<ours/gensim>`;
- analogy accuracy (3CosAdd, the 30,000 most frequent words, case-insensitive; gensim's
  questions-words.txt) and Spearman's rho on WordSim-353, both computed by textnn's metrics for
  both vector sets, so the comparison is of the vectors only. gensim's own
  `evaluate_word_analogies` is printed beside it as a check of the metric.

    python benchmarks/word2vec_vs_gensim.py                          # the full comparison (minutes)
    python benchmarks/word2vec_vs_gensim.py --max-tokens 200000 --epochs 1   # a quick look
    python benchmarks/word2vec_vs_gensim.py --device cuda --threads 2        # ours on a GPU
    python benchmarks/word2vec_vs_gensim.py --archs cbow --noise-group 16    # CBOW sharing noise words
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from textnn.experiment import train  # noqa: E402
from textnn.resolve import config_from_dict  # noqa: E402
from textnn.metrics.word_vectors import (WordVectors, evaluate_analogies, evaluate_similarity,  # noqa: E402
                                        read_analogies, read_similarity_pairs)

CORPUS = REPO.parent / "shared" / "data" / "wikitext2" / "train.txt"


def gensim_test_file(name: str) -> Path:
    from gensim.test.utils import datapath

    return Path(datapath(name))


def read_corpus(path: Path, max_tokens: int, directory: Path) -> tuple[Path, list[list[str]], int]:
    """The first `max_tokens` tokens (whole lines) of the corpus: a file for textnn, sentences for gensim."""
    sentences, total = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        tokens = line.split()
        if max_tokens and total + len(tokens) > max_tokens:
            break
        if tokens:
            sentences.append(tokens)
            total += len(tokens)
    corpus = directory / "corpus.txt"
    corpus.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return corpus, sentences, total


def train_gensim(sentences: list[list[str]], arch: str, threads: int, args) -> tuple[WordVectors, float, object]:
    from gensim.models import Word2Vec

    model = Word2Vec(vector_size=args.dim, window=args.window, negative=args.negative, min_count=args.min_count,
                     sample=args.sample, sg=int(arch == "skipgram"), hs=0, workers=threads, seed=args.seed)
    model.build_vocab(sentences)
    started = time.perf_counter()
    model.train(sentences, total_examples=model.corpus_count, epochs=args.epochs)
    seconds = time.perf_counter() - started
    return WordVectors(list(model.wv.index_to_key), model.wv.vectors), seconds, model.wv


def train_ours(corpus: Path, arch: str, threads: int, args, directory: Path) -> tuple[WordVectors, float]:
    raw = {"task": "embeddings", "name": f"w2v_{arch}_{threads}",
           "data": {"format": "text", "train": str(corpus), "min_freq": args.min_count},
           "model": {"name": "word2vec", "architecture": arch, "loss": "negative", "dim": args.dim,
                     "window": args.window, "negative": args.negative, "sample": args.sample,
                     "noise_group": args.noise_group},
           "train": {"epochs": args.epochs, "threads": threads, "device": args.device, "progress": False,
                     "seed": args.seed}}
    config = config_from_dict(raw, "benchmark")
    run, result = train(config, directory / config.name)
    from textnn.interop.vectors import read_vectors

    words, vectors = read_vectors(run.path / "vectors.bin")
    return WordVectors(words, vectors), result.train_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="plain text, one sentence per line")
    parser.add_argument("--max-tokens", type=int, default=0, help="read only the first N tokens (0 = all)")
    parser.add_argument("--archs", nargs="+", default=["skipgram", "cbow"], choices=["skipgram", "cbow"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--negative", type=int, default=5)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--sample", type=float, default=1e-3)
    parser.add_argument("--noise-group", type=int, default=1,
                        help="ours, CBOW: words sharing noise words (model.noise_group; 1 = a draw per word, as gensim)")
    parser.add_argument("--top-n", type=int, default=30000, help="analogy candidates: the N most frequent words")
    parser.add_argument("--device", default="cpu", help="ours: cpu, cuda or auto")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"{args.corpus}: corpus not found (see ../shared/data/README.md, or pass --corpus)")
    import gensim

    analogies = read_analogies(gensim_test_file("questions-words.txt"))
    pairs = read_similarity_pairs(gensim_test_file("wordsim353.tsv"))
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, gensim {gensim.__version__}, "
          f"ours on {args.device}" + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        corpus, sentences, tokens = read_corpus(args.corpus, args.max_tokens, directory)
        print(f"# corpus {args.corpus.name}: {tokens:,} tokens, {len(sentences):,} lines; dim {args.dim}, "
              f"window {args.window}, negative {args.negative}, min_count {args.min_count}, sample {args.sample}, "
              f"{args.epochs} epochs")
        for arch in args.archs:
            for threads in args.threads:
                torch.set_num_threads(threads)
                theirs, their_seconds, their_wv = train_gensim(sentences, arch, threads, args)
                ours, our_seconds = train_ours(corpus, arch, threads, args, directory)
                words = tokens * args.epochs
                row = {"arch": arch, "threads": threads, "ours_wps": words / our_seconds,
                       "gensim_wps": words / their_seconds}
                for name, vectors in (("ours", ours), ("gensim", theirs)):
                    analogy = evaluate_analogies(vectors, analogies, top_n=args.top_n)
                    row[f"{name}_analogy"] = analogy["3cosadd"]
                    row[f"{name}_coverage"] = analogy["coverage"]
                    row[f"{name}_spearman"] = evaluate_similarity(vectors, pairs)["spearman"]
                row["gensim_own_analogy"] = their_wv.evaluate_word_analogies(
                    str(gensim_test_file("questions-words.txt")), restrict_vocab=args.top_n)[0]
                row["ratio"] = row["ours_wps"] / row["gensim_wps"]
                rows.append(row)
                print(f"{arch} threads={threads}: ours {row['ours_wps']:,.0f} words/s, gensim "
                      f"{row['gensim_wps']:,.0f} words/s, ratio={row['ratio']:.2f}; analogy ours "
                      f"{row['ours_analogy']:.1%} gensim {row['gensim_analogy']:.1%} (gensim's own metric "
                      f"{row['gensim_own_analogy']:.1%}); spearman ours {row['ours_spearman']:.3f} gensim "
                      f"{row['gensim_spearman']:.3f}", flush=True)
    print()
    print("| arch | threads | ours words/s | gensim words/s | ratio | analogy ours | analogy gensim | coverage "
          "| WS353 rho ours | WS353 rho gensim |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arch']} | {r['threads']} | {r['ours_wps']:,.0f} | {r['gensim_wps']:,.0f} | {r['ratio']:.2f} | "
              f"{r['ours_analogy']:.1%} | {r['gensim_analogy']:.1%} | {r['ours_coverage']:.1%} | "
              f"{r['ours_spearman']:.3f} | {r['gensim_spearman']:.3f} |")


if __name__ == "__main__":
    main()
