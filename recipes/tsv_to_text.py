"""Write one column of a TSV file as plain text, one row a line, for `task: pretraining` (which reads
plain text): a task's own sentences, for more masked-LM training on them before fine-tuning
(task-adaptive pre-training, Gururangan et al. 2020, "Don't Stop Pretraining"; the labels are not read).
With --heldout N, N rows drawn at random with --seed go to a second file instead, the pre-training's
dev set, so the task's own dev sentences stay unread.

A held-out row must not be readable in the training share. SST-2's training rows are the phrases of
its sentences' parse trees beside the sentences themselves, so a row drawn at random is most often a
phrase that a longer training row holds word for word (docs/RESULTS.md measures it). So the held-out
rows are drawn only among the rows that no other row contains (in SST-2: whole sentences), and every
row that lies inside a held-out row (its phrases) is left out of the training share, which keeps the
file's order. Rows are compared lower-cased, with runs of white space as one space, as whole words
("good" lies in "a good film", not in "goodness"); a row written twice counts as contained.
    usage: python recipes/tsv_to_text.py TSV OUT_DIR [--column sentence] [--heldout 1000] [--seed 0]
writes OUT_DIR/train.txt (and OUT_DIR/dev.txt with --heldout).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path


def column(tsv: Path, name: str) -> list[str]:
    """The values of column `name` (named in the header row) of a tab-separated file, in file order."""
    header, *rows = (line.split("\t") for line in tsv.read_text(encoding="utf-8").splitlines())
    if name not in header:
        raise SystemExit(f"{tsv}: no column {name!r} in its header ({', '.join(header)})")
    index = header.index(name)
    return [row[index] for row in rows if len(row) > index and row[index].strip()]


def normalised(text: str) -> str:
    """A row as rows are compared: lower-cased, its words joined by single spaces."""
    return " ".join(text.lower().split())


def inner_phrases(row: str) -> set[str]:
    """Every run of consecutive words of a normalised row that is shorter than the row itself."""
    words = row.split()
    n = len(words)
    return {" ".join(words[start:end]) for start in range(n) for end in range(start + 1, n + 1) if end - start < n}


def split_heldout(texts: list[str], count: int, seed: int, source: Path) -> tuple[list[str], list[str], int]:
    """`count` rows that no other row contains, drawn with `seed`, and the training share: the other rows in
    file order, less those that lie inside a held-out row. Returns (held_out, training, rows left out)."""
    keys = [normalised(text) for text in texts]
    seen = Counter(keys)
    contained = set()  # rows that lie inside another row
    for key in seen:
        contained |= inner_phrases(key) & seen.keys()
    candidates = [i for i, key in enumerate(keys) if seen[key] == 1 and key not in contained]
    if count > len(candidates):
        raise SystemExit(f"--heldout {count}: only {len(candidates)} of the {len(texts)} rows of {source} lie in no "
                         f"other row (the rest are phrases of longer rows, or written twice); give at most "
                         f"{len(candidates)}")
    chosen = random.Random(seed).sample(candidates, count)
    held_keys = {keys[i] for i in chosen}
    inside_held = set().union(*(inner_phrases(key) & seen.keys() for key in held_keys))
    training = [text for text, key in zip(texts, keys) if key not in held_keys and key not in inside_held]
    return [texts[i] for i in chosen], training, len(texts) - count - len(training)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tsv", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--column", default="sentence", help="the column to write (default sentence)")
    parser.add_argument("--heldout", type=int, default=0,
                        help="rows drawn at random into dev.txt among those no other row contains (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    args = parser.parse_args()

    texts = column(args.tsv, args.column)
    if not 0 <= args.heldout < len(texts):
        raise SystemExit(f"--heldout {args.heldout}: give 0 to {len(texts) - 1} ({args.tsv} has {len(texts)} rows)")
    left_out = 0
    if args.heldout:
        held_out, texts, left_out = split_heldout(texts, args.heldout, args.seed, args.tsv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.heldout:
        (args.out_dir / "dev.txt").write_text("\n".join(held_out) + "\n", encoding="utf-8")
    (args.out_dir / "train.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    print(f"wrote {len(texts)} lines to {args.out_dir / 'train.txt'}"
          + (f" and {args.heldout} to {args.out_dir / 'dev.txt'}; {left_out} rows that lie inside a held-out row "
             f"were left out" if args.heldout else ""))


if __name__ == "__main__":
    main()
