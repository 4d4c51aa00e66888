"""Pre-training inputs for BERT: documents -> segment pairs (NSP) or full-sentence blocks -> masked tokens.

Documents (`read_documents`): a plain text file where blank lines separate documents, or WikiText,
whose articles start at a level-1 heading line ` = Title = ` (sub-headings ` = = Part = = ` are
dropped as markup). Each document is a list of sentences, split after . ! ? before a capital, a
quote or a bracket: BERT builds its pairs from sentences (Devlin et al. 2019 §3.1, Task #2).

Pairs for next-sentence prediction (`nsp_instances`), as BERT's create_pretraining_data.py does:
sentences of a document are gathered until they fill the token budget, cut at a random point into A
and B; with probability 1/2 B is what follows A in the document (IsNext), otherwise B is taken from
another document, never the same one (NotNext), and the sentences A did not use go back to the pool.
The pair is cut longest-first to fit (data/packing.py). With `single_rate` a share of the gathered
chunks is framed as one segment, [CLS] a [SEP], with no NSP label (is_next -1), so pre-training also
shows the single-segment frame that single-sentence fine-tuning reads.

Full sentences (`full_sentence_blocks`, RoBERTa's FULL-SENTENCES, Liu et al. 2019 §4.2): contiguous
sentences packed up to the budget, crossing document boundaries with an extra [SEP] between
documents; no second segment, no NSP.

Short sequences (`short_rate`, the released code's `short_seq_prob`, 0.1 there): a sequence's token
budget is, with that probability, drawn uniformly from 2 .. the full budget, so the model also meets
sequences as short as fine-tuning inputs ("to minimize the mismatch between pre-training and
fine-tuning", its comment says). The reference draws the budget once per document; here it is drawn
anew for each sequence, since a WikiText article yields dozens of sequences and a per-document draw
would make whole articles short or long.

Masking (`mask_tokens`, Devlin et al. 2019 §3.1 Task #1 and Appendix A.1): 15% of the positions
(never [CLS]/[SEP]) are chosen, and of those 80% become [MASK], 10% a random token and 10% stay as
they are, so the model cannot know which positions it is asked about and keeps a representation of
every input token. With whole-word masking (the released code's `do_whole_word_mask`) the pieces of
one word are chosen together.

How many positions: max(1, round(rate * n)) with n the MASKABLE positions of the sequence (its
pieces, [CLS] and [SEP] left out). The released create_pretraining_data.py computes
num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
over all its tokens, [CLS] and the one or two [SEP] included, so for some lengths it predicts one
position more (a pair of 14 pieces, 17 tokens: round(2.55) = 3 there, round(2.1) = 2 here). textnn
keeps its count on purpose: the share of the text asked about is then the paper's 15% whatever the
sequence length (counted with the 2-3 specials, which are never chosen, it is more, most so on short
sequences), and changing it would change the masks, and so the results, of every pre-training run
made so far. There is no max_predictions_per_seq cap; at the README's settings of the released code
(max_seq_length 128, max_predictions_per_seq 20) it never binds: 15% of 128 is 19. Rounding is
Python 3's `round` (halves to even).

Which positions: all masks of one epoch come from ONE generator seeded by (seed, epoch), drawn
sequence after sequence in the order of the list given to `mask_instances` (not one generator per
sequence). The masks are therefore fixed by (seed, epoch) and the sequences in their order: a run
resumed at any epoch sees exactly the masks it would have seen, and drawing them again gives the
same masks; but a sequence's mask also depends on the sequences before it in the list, so adding,
removing or reordering sequences changes the masks of those after it. Static masking (BERT) draws
with epoch 0 for every epoch, dynamic masking (RoBERTa §4.1) with the epoch itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from textnn.data.packing import pack, truncate_longest_first
from textnn.data.readers import read_text
from textnn.data.tokenizers import UNK as WORDPIECE_UNK
from textnn.errors import TextnnError

IGNORE = -100  # target of an unmasked position: ignored by the loss (torch's cross_entropy default)
_HEADING = re.compile(r"^ ?= [^=].* = ?$")  # WikiText article title: " = Title = "
_SUBHEADING = re.compile(r"^ ?(= ){2,}.*( =){2,} ?$")  # " = = Part = = " and deeper
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])")


@dataclass
class Instance:
    """One pre-training sequence before masking."""

    ids: list[int]  # [CLS] a [SEP] (b [SEP])
    segments: list[int]
    words: list[int]  # word index of each position (-1 for [CLS]/[SEP]): whole-word masking keeps words together
    is_next: int  # 1 IsNext, 0 NotNext, -1 no NSP


def split_sentences(line: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(line.strip()) if s.strip()]


def read_documents(path: str, wikitext: bool, encoding: str = "utf-8") -> list[list[str]]:
    """Documents of a text file as lists of sentences: blank-line separated, or WikiText articles (whose
    "<unk>", the words its authors left out, is read as WordPiece's [UNK]: one unknown piece, not the
    three pieces < unk > that 7% of its word-level tokens would otherwise spend on mark-up)."""
    lines = read_text(path, encoding).splitlines()
    documents: list[list[str]] = [[]]
    for line in lines:
        if wikitext:
            if _SUBHEADING.match(line):
                continue
            if _HEADING.match(line):
                documents.append([])
                continue
            if line.strip():
                documents[-1].extend(split_sentences(line.replace("<unk>", WORDPIECE_UNK)))
        elif not line.strip():
            documents.append([])
        else:
            documents[-1].extend(split_sentences(line))
    documents = [d for d in documents if d]
    if not documents:
        raise TextnnError(f"{path}: no text to pre-train on; give a plain text file (blank lines between documents)")
    return documents


@dataclass
class Sentence:
    ids: list[int]  # word-piece ids
    words: list[int]  # index of the word each piece belongs to, within the sentence


def _frame(a: list[Sentence], b: list[Sentence] | None, cls_id: int, sep_id: int, max_length: int) -> tuple:
    """Pack sentences A (and B) as [CLS] a [SEP] (b [SEP]), cut longest-first; word ids made unique across the sequence."""
    def flat(sentences: list[Sentence], offset: int) -> tuple[list[int], list[int], int]:
        ids, words = [], []
        for s in sentences:
            ids += s.ids
            words += [offset + w for w in s.words]
            offset += (max(s.words) + 1) if s.words else 0
        return ids, words, offset

    a_ids, a_words, offset = flat(a, 0)
    b_ids, b_words, _ = flat(b, offset) if b is not None else ([], [], 0)
    a_ids, b_cut = truncate_longest_first(a_ids, b_ids if b is not None else None, max_length - (3 if b else 2))
    packed = pack(a_ids, b_cut, cls_id, sep_id)
    words = [-1, *a_words[:len(a_ids)], -1]
    if b is not None:
        words += [*b_words[:len(b_cut)], -1]
    return packed.ids, packed.segments, words


def _target_length(rng: np.random.Generator, budget: int, short_rate: float) -> int:
    """The token budget of the next sequence: the full `budget`, or with probability `short_rate` a length
    drawn uniformly from 2 .. budget (no draw at all when the rate is 0, so such runs repeat older ones)."""
    if short_rate and rng.random() < short_rate:
        return int(rng.integers(2, budget + 1))
    return budget


def nsp_instances(documents: list[list[Sentence]], max_length: int, cls_id: int, sep_id: int,
                  seed: int, short_rate: float = 0.0, single_rate: float = 0.0) -> list[Instance]:
    """Sentence pairs with IsNext / NotNext labels, half each in expectation, a `short_rate` share of them
    gathered to a shorter budget and a `single_rate` share framed as a single segment without an NSP
    label (see the module docstring)."""
    if len(documents) < 2:
        raise TextnnError("next-sentence prediction needs at least 2 documents (its negatives come from another "
                          "document); give more documents or set data.nsp=false")
    rng = np.random.default_rng([seed, 7])
    budget = max_length - 3
    instances = []
    for d, document in enumerate(documents):
        chunk: list[Sentence] = []
        length, i = 0, 0
        target = _target_length(rng, budget, short_rate)
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i].ids)
            if i == len(document) - 1 or length >= target:
                if chunk and single_rate and rng.random() < single_rate:
                    ids, segments, words = _frame(chunk, None, cls_id, sep_id, max_length)
                    instances.append(Instance(ids, segments, words, -1))
                elif chunk:
                    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                    a = chunk[:a_end]
                    if len(chunk) == 1 or rng.random() < 0.5:
                        other = int(rng.integers(0, len(documents) - 1))
                        other += other >= d  # any document but this one
                        start = int(rng.integers(0, len(documents[other])))
                        b, taken = [], 0
                        for s in documents[other][start:]:
                            b.append(s)
                            taken += len(s.ids)
                            if taken >= target - sum(len(s.ids) for s in a):
                                break
                        is_next = 0
                        i -= len(chunk) - a_end  # the unused sentences of this chunk go back
                    else:
                        b, is_next = chunk[a_end:], 1
                    ids, segments, words = _frame(a, b, cls_id, sep_id, max_length)
                    instances.append(Instance(ids, segments, words, is_next))
                chunk, length = [], 0
                target = _target_length(rng, budget, short_rate)
            i += 1
    return instances


def full_sentence_blocks(documents: list[list[Sentence]], max_length: int, cls_id: int, sep_id: int,
                         seed: int = 0, short_rate: float = 0.0) -> list[Instance]:
    """Contiguous sentences packed to max_length, crossing documents with an extra [SEP] (RoBERTa §4.2);
    a `short_rate` share of the blocks packed to a shorter budget (see the module docstring)."""
    budget = max_length - 2
    rng = np.random.default_rng([seed, 13])
    target = _target_length(rng, budget, short_rate)
    instances: list[Instance] = []
    ids: list[int] = []
    words: list[int] = []

    def flush() -> None:
        nonlocal target
        if ids:
            instances.append(Instance([cls_id, *ids, sep_id], [0] * (len(ids) + 2), [-1, *words, -1], -1))
            target = _target_length(rng, budget, short_rate)
        ids.clear()
        words.clear()

    for d, document in enumerate(documents):
        if d and ids:
            if len(ids) + 1 > target:
                flush()
            else:
                ids.append(sep_id)
                words.append(-1)
        for sentence in document:
            if ids and len(ids) + len(sentence.ids) > target:
                flush()
            offset = (max(words) + 1) if words else 0
            start = 0
            while start < len(sentence.ids):  # a sentence longer than the block's budget is cut
                if start or len(ids) >= target:
                    flush()
                piece = target - len(ids)
                ids.extend(sentence.ids[start:start + piece])
                words.extend(offset + w for w in sentence.words[start:start + piece])
                start += piece
    flush()
    return instances


def mask_tokens(ids: list[int], words: list[int], rng: np.random.Generator, mask_id: int, random_ids: np.ndarray,
                rate: float = 0.15, whole_word: bool = False) -> tuple[list[int], list[int]]:
    """(inputs, targets) of one sequence: max(1, round(rate * n)) of its n maskable positions (word id >= 0;
    [CLS]/[SEP] are not counted, unlike the released code: see the module docstring) chosen (whole words
    together when `whole_word`), each then [MASK] w.p. 0.8, a token drawn uniformly from `random_ids`
    w.p. 0.1, or left as it is w.p. 0.1; targets hold the original id there, IGNORE elsewhere.

    Draws from `rng` and advances it: the caller's order of sequences is part of what the masks depend on."""
    positions = [p for p, w in enumerate(words) if w >= 0]
    inputs, targets = list(ids), [IGNORE] * len(ids)
    if not positions:
        return inputs, targets
    # create_pretraining_data.py's num_to_predict, but over the maskable positions only (module docstring)
    wanted = max(1, int(round(len(positions) * rate)))
    if whole_word:
        groups: dict[int, list[int]] = {}
        for p in positions:
            groups.setdefault(words[p], []).append(p)
        candidates = list(groups.values())
    else:
        candidates = [[p] for p in positions]
    chosen: list[int] = []
    for g in rng.permutation(len(candidates)):
        if len(chosen) >= wanted:
            break
        if len(chosen) + len(candidates[g]) > wanted:
            continue  # a word that would overshoot is skipped, as the released code does
        chosen += candidates[g]
    draws = rng.random(len(chosen))
    replacements = rng.choice(random_ids, size=len(chosen))
    for p, u, r in zip(chosen, draws, replacements):
        targets[p] = ids[p]
        if u < 0.8:
            inputs[p] = mask_id
        elif u < 0.9:
            inputs[p] = int(r)
    return inputs, targets


def mask_instances(instances: list[Instance], seed: int, epoch: int, mask_id: int, random_ids: np.ndarray,
                   rate: float = 0.15, whole_word: bool = False) -> list[tuple[list[int], list[int]]]:
    """Masked (inputs, targets) of every instance, in order, all drawn from one generator seeded by
    (seed, epoch): the same (seed, epoch) and the same instances in the same order give the same masks,
    whatever else the process drew before (exact resume); an instance's mask also depends on the
    instances before it in the list (module docstring)."""
    rng = np.random.default_rng([seed, epoch, 11])
    return [mask_tokens(x.ids, x.words, rng, mask_id, random_ids, rate, whole_word) for x in instances]
