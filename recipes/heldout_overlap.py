"""How much of a held-out text a model could already have read in its training text, line by line.

For two plain-text files (one row a line, as recipes/tsv_to_text.py writes them), this prints how many
held-out rows lie inside some training row, three ways: as whole words (both lower-cased, runs of white
space as one space, the row's words a run of the training row's words), as an identical line, and as
any substring (which also finds "good" in "goodness"); and how many training rows lie inside some
held-out row as whole words. Each check searches the other file's rows joined into one text, so it
does not share code with the split it checks.
    usage: python recipes/heldout_overlap.py TRAIN_TXT HELDOUT_TXT
"""

from __future__ import annotations

import argparse
from pathlib import Path


def rows(path: Path) -> list[str]:
    """The non-empty lines of a file, lower-cased, with their words joined by single spaces."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [" ".join(line.lower().split()) for line in lines if line.strip()]


def share(found: int, total: int) -> str:
    return f"{found:,} of {total:,} ({found / max(total, 1):.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", type=Path)
    parser.add_argument("heldout", type=Path)
    args = parser.parse_args()
    train, heldout = rows(args.train), rows(args.heldout)
    # one text, each row between spaces and rows apart by a newline: a search for " words " can only
    # match whole words inside one row, since no row holds a newline
    train_text = "\n".join(f" {row} " for row in train)
    heldout_text = "\n".join(f" {row} " for row in heldout)
    train_lines = set(train)
    as_words = sum(f" {row} " in train_text for row in heldout)
    identical = sum(row in train_lines for row in heldout)
    as_substring = sum(row in train_text for row in heldout)
    inside_heldout = sum(f" {row} " in heldout_text for row in train)
    print(f"held-out rows inside a training row: as whole words {share(as_words, len(heldout))}; "
          f"as an identical line {share(identical, len(heldout))}; "
          f"as any substring {share(as_substring, len(heldout))}")
    print(f"training rows inside a held-out row, as whole words: {share(inside_heldout, len(train))}")


if __name__ == "__main__":
    main()
