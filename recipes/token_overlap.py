"""How well a pre-training corpus's tokens cover a task's text, under a tokenizer's rules.

A pre-trained encoder helps a task only with the tokens it learned: a task word tokenized another way
than the corpus wrote it (SST-2's "do n't" against WikiText-2's "don 't") is a sequence the model never
saw. For each word-rule version asked, this prints the corpus's token count (and how many of them are
mark-up: WikiText's "<unk>" cut into < unk > and its @-@ markers), the share of the task's tokens the
corpus never holds, and the most frequent of those.
    usage: python recipes/token_overlap.py ../shared/data/wikitext2/train.txt ../shared/data/sst2/dev.tsv \
               [--rules 2 3] [--column 0]
The task file is a TSV with a header row; --column is its text column.
"""

from __future__ import annotations

import argparse
from collections import Counter

from textnn.data.tokenizers import Tokenizer

NEGATION = "n't"
MARKUP = ("<", "unk", ">", "@")  # what WikiText's <unk> and @-@ / @,@ / @.@ become when cut as punctuation


def counts(lines, tokenizer: Tokenizer) -> Counter:
    found: Counter = Counter()
    for line in lines:
        found.update(tokenizer(line))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus")
    parser.add_argument("task", help="a TSV file with a header row")
    parser.add_argument("--rules", type=int, nargs="+", default=[2, 3], help="word-rule versions to compare")
    parser.add_argument("--column", type=int, default=0, help="the task file's text column")
    args = parser.parse_args()
    with open(args.corpus, encoding="utf-8") as file:
        corpus_lines = file.readlines()
    with open(args.task, encoding="utf-8") as file:
        task_lines = [line.rstrip("\n").split("\t")[args.column] for line in file.readlines()[1:]]
    for rules in args.rules:
        tokenizer = Tokenizer.from_dict({"kind": "word", "lowercase": True, "rules": rules})
        corpus, task = counts(corpus_lines, tokenizer), counts(task_lines, tokenizer)
        corpus_total, task_total = sum(corpus.values()), sum(task.values())
        unseen = Counter({token: n for token, n in task.items() if token not in corpus})
        markup = sum(corpus[token] for token in MARKUP)
        print(f"word rules {rules}: corpus {corpus_total:,} tokens ({markup / corpus_total:.1%} mark-up: "
              f"{', '.join(MARKUP)}); task {task_total:,} tokens, {sum(unseen.values()) / task_total:.2%} never in "
              f"the corpus; {NEGATION!r} {corpus[NEGATION]:,} times in the corpus, {task[NEGATION]:,} in the task; "
              f"most frequent unseen: {', '.join(token for token, _ in unseen.most_common(8))}")


if __name__ == "__main__":
    main()
