"""BERT's input frame: one or two token sequences packed as [CLS] a [SEP] (b [SEP]) with segment ids.

Devlin et al. (2019) §3, "Input/Output Representations" and Figure 2: every input starts with [CLS]
(whose final state the pooler reads), each sentence ends with [SEP], and a learned segment embedding
marks tokens of the first sentence (0, with [CLS] and the first [SEP]) and of the second (1, with
its [SEP]). Every task that feeds such an encoder packs its inputs here, so the frame is built once.

Truncation to a maximum length is longest-first exactly as BERT's reference code does it
(`_truncate_seq_pair` in run_classifier.py and create_pretraining_data.py): one token at a time from
the end of the longer sequence, from the second on a tie, so a short sentence is kept whole while a
long one is cut. `transformers`' fast tokenizers (truncation="longest_first", from the `tokenizers`
library) give the same lengths but for one case: when both sequences must be cut and the budget for
their tokens is odd, they give the odd token to the longer sequence (to the second on a tie), while
the reference, and so textnn, gives it to the first. Sequences of 6 and 6 tokens cut to 7: here 4 + 3,
there 3 + 4; 5 and 8 cut to 7: here 4 + 3, there 3 + 4; 8 and 5 cut to 7: 4 + 3 in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from textnn.errors import TextnnError


@dataclass
class Packed:
    ids: list[int]  # [CLS] a [SEP] (b [SEP])
    segments: list[int]  # 0 for [CLS], a and its [SEP]; 1 for b and its [SEP]
    first: tuple[int, int]  # [start, end) of a's tokens in ids (after truncation)
    second: tuple[int, int] | None  # [start, end) of b's tokens, or None for a single sequence


def truncate_longest_first(first: list, second: list | None, budget: int) -> tuple[list, list | None]:
    """Cut tokens from the end of the longer sequence (the second on ties, as BERT's reference code) until
    both fit in `budget`; where both are cut to an odd budget the first keeps one token more (see the
    module docstring for where transformers' fast tokenizers differ)."""
    a, b = len(first), len(second) if second is not None else 0
    while a + b > budget:
        if a > b:
            a -= 1
        else:
            b -= 1
    return first[:a], (second[:b] if second is not None else None)


def pack(first: list[int], second: list[int] | None, cls_id: int, sep_id: int, max_length: int = 0) -> Packed:
    """[CLS] first [SEP] (second [SEP]) with segment ids, truncated longest-first to `max_length` ids
    in all (0 = no limit)."""
    specials = 2 if second is None else 3
    if max_length:
        if max_length < specials + (1 if second is None else 2):
            raise TextnnError(f"a maximum length of {max_length} leaves no room for text beside [CLS] and "
                              f"[SEP]; raise data.max_length")
        first, second = truncate_longest_first(first, second, max_length - specials)
    ids = [cls_id, *first, sep_id]
    segments = [0] * len(ids)
    span_a = (1, 1 + len(first))
    span_b = None
    if second is not None:
        span_b = (len(ids), len(ids) + len(second))
        ids += [*second, sep_id]
        segments += [1] * (len(second) + 1)
    return Packed(ids, segments, span_a, span_b)
