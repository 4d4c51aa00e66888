"""Write one column of a TSV file as plain text, one row a line, for `task: pretraining` (which reads
plain text): a task's own sentences, for more masked-LM training on them before fine-tuning
(task-adaptive pre-training, Gururangan et al. 2020, "Don't Stop Pretraining"; the labels are not read).
With --heldout N, N rows drawn at random with --seed go to a second file instead, the pre-training's
dev set, so the task's own dev sentences stay unread.
    usage: python recipes/tsv_to_text.py TSV OUT_DIR [--column sentence] [--heldout 2000] [--seed 0]
writes OUT_DIR/train.txt (and OUT_DIR/dev.txt with --heldout).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path


def column(tsv: Path, name: str) -> list[str]:
    """The values of column `name` (named in the header row) of a tab-separated file, in file order."""
    header, *rows = (line.split("\t") for line in tsv.read_text(encoding="utf-8").splitlines())
    if name not in header:
        raise SystemExit(f"{tsv}: no column {name!r} in its header ({', '.join(header)})")
    index = header.index(name)
    return [row[index] for row in rows if len(row) > index and row[index].strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tsv", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--column", default="sentence", help="the column to write (default sentence)")
    parser.add_argument("--heldout", type=int, default=0, help="rows drawn at random into dev.txt (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    args = parser.parse_args()

    texts = column(args.tsv, args.column)
    if not 0 <= args.heldout < len(texts):
        raise SystemExit(f"--heldout {args.heldout}: give 0 to {len(texts) - 1} ({args.tsv} has {len(texts)} rows)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.heldout:
        random.Random(args.seed).shuffle(texts)
        (args.out_dir / "dev.txt").write_text("\n".join(texts[:args.heldout]) + "\n", encoding="utf-8")
        texts = texts[args.heldout:]
    (args.out_dir / "train.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    print(f"wrote {len(texts)} lines to {args.out_dir / 'train.txt'}"
          + (f" and {args.heldout} to {args.out_dir / 'dev.txt'}" if args.heldout else ""))


if __name__ == "__main__":
    main()
