"""MLM masking and NSP pairs (data/masking.py) and the pre-training metrics (tasks/pretraining.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from textnn.data.masking import (IGNORE, Instance, Sentence, full_sentence_blocks, mask_instances, mask_tokens,
                                 nsp_instances, read_documents)
from textnn.tasks.pretraining import PretrainingOutput, pretraining_metrics, sequence_losses

MASK, CLS, SEP = 4, 2, 3
RANDOM_IDS = np.arange(5, 1005)


def test_80_10_10_over_many_draws():
    rng = np.random.default_rng(0)
    ids = list(range(100, 300))  # 200 maskable positions, every id distinct from MASK and rare among RANDOM_IDS
    words = list(range(200))
    masked = kept = replaced = 0
    for _ in range(300):
        inputs, targets = mask_tokens(ids, words, rng, MASK, RANDOM_IDS)
        chosen = [p for p, t in enumerate(targets) if t != IGNORE]
        assert len(chosen) == round(0.15 * 200)  # exactly 15% of the positions are predicted
        assert all(targets[p] == ids[p] for p in chosen)  # the target is the original token
        assert all(inputs[p] == ids[p] for p in range(200) if targets[p] == IGNORE)  # the rest is untouched
        for p in chosen:
            if inputs[p] == MASK:
                masked += 1
            elif inputs[p] == ids[p]:
                kept += 1
            else:
                replaced += 1
    total = masked + kept + replaced
    # binomial standard deviations at n = 9000: 0.0042 for 0.8, 0.0032 for 0.1; allow about 4 of them
    assert abs(masked / total - 0.8) < 0.017
    assert abs(kept / total - 0.1) < 0.013  # a random draw equal to the original is rare here (ids 100-299)
    assert abs(replaced / total - 0.1) < 0.013


def test_specials_are_never_chosen():
    rng = np.random.default_rng(1)
    ids, words = [CLS, 10, 11, SEP, 12, SEP], [-1, 0, 1, -1, 2, -1]
    for _ in range(50):
        _, targets = mask_tokens(ids, words, rng, MASK, RANDOM_IDS, rate=0.9)
        assert all(targets[p] == IGNORE for p in (0, 3, 5))


def test_whole_word_masking_keeps_pieces_together():
    rng = np.random.default_rng(2)
    words = [-1] + [w for w in range(40) for _ in range(1 + w % 3)] + [-1]  # words of 1, 2 and 3 pieces
    ids = [CLS] + [100 + i for i in range(len(words) - 2)] + [SEP]
    saw_multi = False
    for _ in range(200):
        _, targets = mask_tokens(ids, words, rng, MASK, RANDOM_IDS, whole_word=True)
        chosen_words = {words[p] for p, t in enumerate(targets) if t != IGNORE}
        for w in chosen_words:
            pieces = [p for p, x in enumerate(words) if x == w]
            assert all(targets[p] != IGNORE for p in pieces)  # all of the word's pieces or none
            saw_multi |= len(pieces) > 1
        assert sum(t != IGNORE for t in targets) <= round(0.15 * (len(words) - 2))
    assert saw_multi


def test_static_masks_repeat_and_dynamic_masks_change_with_the_epoch():
    instances = [Instance([CLS, *range(100, 140), SEP], [0] * 42, [-1, *range(40), -1], -1) for _ in range(5)]
    draw = lambda epoch: mask_instances(instances, seed=3, epoch=epoch, mask_id=MASK, random_ids=RANDOM_IDS)  # noqa: E731
    assert draw(1) == draw(1)  # a resumed run redraws exactly the same masks
    assert draw(1) != draw(2)
    assert draw(0) != draw(1)


def test_masks_are_fixed_by_seed_epoch_and_the_order_of_the_sequences():
    """One generator per (seed, epoch), drawn sequence after sequence: the same seed, epoch and list give
    the same masks; a sequence's mask depends on the sequences before it (not on those after it), so
    moving it elsewhere in the list gives it another mask."""
    instances = [Instance([CLS, *range(100 + 50 * i, 140 + 50 * i), SEP], [0] * 42, [-1, *range(40), -1], -1)
                 for i in range(5)]

    def targets(batch, seed=3, epoch=1):
        return [t for _, t in mask_instances(batch, seed=seed, epoch=epoch, mask_id=MASK, random_ids=RANDOM_IDS)]

    drawn = targets(instances)
    assert targets(instances) == drawn
    assert targets(instances, seed=4) != drawn and targets(instances, epoch=2) != drawn
    assert targets(instances[:3]) == drawn[:3]  # what comes after a sequence does not change its mask
    moved = targets(instances[::-1])
    assert moved[-1] != drawn[0]  # the same first sequence, drawn last: another mask
    assert moved[0] == targets(instances[4:])[0]  # drawn first: the mask a list starting with it gives


# pieces per segment -> (ours: max(1, round(0.15 n)) over the n pieces, the reference's num_to_predict
# max(1, int(round(0.15 * tokens))) over the tokens with [CLS] and [SEP]), worked by hand
COUNTS = {(7, 7): (2, 3), (3, 4): (1, 2), (14,): (2, 2), (1,): (1, 1), (20,): (3, 3), (40, 25): (10, 10)}


@pytest.mark.parametrize("pieces", list(COUNTS))
def test_the_number_of_masked_positions_counts_the_pieces_not_cls_and_sep(pieces):
    """The count is taken over the maskable pieces; create_pretraining_data.py counts [CLS] and [SEP] too,
    so a pair of 7 + 7 pieces (17 tokens) gets 2 predictions here and 3 there (data/masking.py says why)."""
    words, ids = [-1], [CLS]
    for n in pieces:
        words += list(range(len(words) - 1, len(words) - 1 + n)) + [-1]
        ids += [100 + len(ids) + i for i in range(n)] + [SEP]
    ours, reference = COUNTS[pieces]
    assert len(ids) == sum(pieces) + 1 + len(pieces)
    assert reference == max(1, int(round(len(ids) * 0.15)))  # min(max_predictions_per_seq = 20, ...) does not bind
    rng = np.random.default_rng(5)
    for _ in range(20):
        _, targets = mask_tokens(ids, words, rng, MASK, RANDOM_IDS)
        assert sum(t != IGNORE for t in targets) == ours


def _documents(n_docs: int, n_sentences: int) -> list[list[Sentence]]:
    # token id = 1000 * (document + 1) + sentence: where a segment came from can be read off its ids
    return [[Sentence([1000 * (d + 1) + s] * 3, [0, 0, 1]) for s in range(n_sentences)] for d in range(n_docs)]


def test_nsp_pairs_are_half_next_and_negatives_come_from_another_document():
    docs = _documents(30, 40)
    instances = nsp_instances(docs, max_length=20, cls_id=CLS, sep_id=SEP, seed=0)
    labels = [x.is_next for x in instances]
    assert set(labels) == {0, 1}
    assert abs(np.mean(labels) - 0.5) < 4 * math.sqrt(0.25 / len(labels))
    for x in instances:
        a = [t for t, s in zip(x.ids, x.segments) if s == 0 and t not in (CLS, SEP)]
        b = [t for t, s in zip(x.ids, x.segments) if s == 1 and t != SEP]
        assert a and b and len(x.ids) <= 20
        doc_a, doc_b = {t // 1000 for t in a}, {t // 1000 for t in b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if x.is_next:
            assert doc_a == doc_b and b[0] % 1000 == a[-1] % 1000 + 1  # B is the very next sentence
        else:
            assert doc_a != doc_b  # never a "random" segment of the same document


def test_full_sentence_blocks_cover_the_text_in_order_with_a_separator_between_documents():
    docs = _documents(3, 5)
    blocks = full_sentence_blocks(docs, max_length=12, cls_id=CLS, sep_id=SEP)
    assert all(len(b.ids) <= 12 and b.ids[0] == CLS and b.ids[-1] == SEP for b in blocks)
    inner = [t for b in blocks for t in b.ids[1:-1]]
    text = [t for t in inner if t != SEP]
    assert text == [t for d in docs for s in d for t in s.ids]
    assert inner.count(SEP) >= 1  # documents joined inside a block are separated


def _long_documents(n_docs: int, n_sentences: int, seed: int = 5) -> list[list[Sentence]]:
    """Documents of sentences of 3-12 pieces; piece id = 100000 * (document + 1) + running position."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        position, doc = 0, []
        for _ in range(n_sentences):
            n = int(rng.integers(3, 13))
            doc.append(Sentence([100_000 * (d + 1) + position + k for k in range(n)], list(range(n))))
            position += n
        docs.append(doc)
    return docs


def test_no_short_or_single_share_repeats_the_plain_pairs():
    docs = _long_documents(10, 30)
    plain = nsp_instances(docs, max_length=64, cls_id=CLS, sep_id=SEP, seed=3)
    assert nsp_instances(docs, 64, CLS, SEP, seed=3, short_rate=0.0, single_rate=0.0) == plain


def test_a_short_share_of_the_pairs_is_gathered_to_a_shorter_budget():
    docs = _long_documents(20, 200)
    full = nsp_instances(docs, max_length=128, cls_id=CLS, sep_id=SEP, seed=0)
    mixed = nsp_instances(docs, max_length=128, cls_id=CLS, sep_id=SEP, seed=0, short_rate=0.3)
    assert all(len(x.ids) <= 128 for x in mixed)
    # full budgets gather ~125 pieces (chunks end past the budget, then are cut): almost none below 64
    short = lambda instances: np.mean([len(x.ids) < 64 for x in instances])  # noqa: E731
    assert short(full) < 0.02
    # 30% of the budgets are uniform in 2..125, and a chunk ends a sentence (~7 pieces) past its budget:
    # about 0.3 x 0.45 of the sequences fall below 64
    assert 0.08 < short(mixed) < 0.25
    assert len(mixed) > len(full)


def test_a_single_segment_share_is_framed_cls_a_sep_without_an_nsp_label():
    docs = _long_documents(20, 100)
    instances = nsp_instances(docs, max_length=64, cls_id=CLS, sep_id=SEP, seed=1, single_rate=0.25)
    singles = [x for x in instances if x.is_next == -1]
    assert abs(len(singles) / len(instances) - 0.25) < 0.06
    assert {x.is_next for x in instances} == {-1, 0, 1}
    for x in singles:
        assert x.ids[0] == CLS and x.ids[-1] == SEP and x.ids.count(SEP) == 1 and set(x.segments) == {0}
        assert len(x.ids) <= 64 and x.words[0] == -1 and x.words[-1] == -1
        text = x.ids[1:-1]
        assert text == list(range(text[0], text[0] + len(text)))  # contiguous text of one document
        # masking chooses among the text positions only, 15% of them
        _, targets = mask_tokens(x.ids, x.words, np.random.default_rng(0), MASK, RANDOM_IDS)
        assert targets[0] == IGNORE and targets[-1] == IGNORE
        assert sum(t != IGNORE for t in targets) == max(1, round(0.15 * len(text)))


def test_full_sentence_blocks_with_short_budgets_still_cover_the_text_in_order():
    docs = _long_documents(4, 60)
    blocks = full_sentence_blocks(docs, max_length=40, cls_id=CLS, sep_id=SEP, seed=2, short_rate=0.5)
    assert all(len(b.ids) <= 40 and b.ids[0] == CLS and b.ids[-1] == SEP and b.is_next == -1 for b in blocks)
    text = [t for b in blocks for t in b.ids[1:-1] if t != SEP]
    assert text == [t for d in docs for s in d for t in s.ids]
    lengths = [len(b.ids) for b in blocks]
    assert np.mean([n < 20 for n in lengths]) > 0.15  # short blocks are there...
    assert max(lengths) == 40  # ...beside full ones


def test_nsp_loss_and_accuracy_leave_out_single_segments():
    targets = torch.tensor([[IGNORE, 2], [IGNORE, 1]])
    logits = torch.log(torch.tensor([[0.2, 0.2, 0.6], [0.5, 0.25, 0.25]]))  # [N=2, V]
    nsp = torch.log(torch.tensor([[0.9, 0.1], [0.4, 0.6]]))
    _, nsp_loss, _ = sequence_losses(PretrainingOutput(logits, nsp), targets, torch.tensor([0, -1]))
    assert nsp_loss.tolist() == pytest.approx([-math.log(0.9), 0.0], rel=1e-5)
    sums = {"mlm_nll": 1.0, "mlm_correct": 1, "positions": 2, "nsp_nll": -math.log(0.9), "nsp_correct": 1,
            "nsp_sequences": 1}
    metrics = pretraining_metrics(sums, 2, nsp=True)
    assert metrics["nsp_accuracy"] == 1.0 and metrics["nsp_loss"] == pytest.approx(-math.log(0.9))


def test_wikitext_articles_are_documents(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text(" \n = Alpha = \n \n First one . Second one . \n \n = = Part = = \n \n Third . \n"
                    " = Beta = \n \n Other text . \n", encoding="utf-8")
    docs = read_documents(str(path), wikitext=True)
    assert docs == [["First one .", "Second one ."] + ["Third ."], ["Other text ."]]
    plain = tmp_path / "plain.txt"
    plain.write_text("a b. C d.\n\ne f.\n", encoding="utf-8")
    assert read_documents(str(plain), wikitext=False) == [["a b.", "C d."], ["e f."]]


def test_wikitext_unknown_word_is_one_unknown_piece(tmp_path):
    from textnn.data.tokenizers import Tokenizer

    path = tmp_path / "wiki.txt"
    path.write_text(" = Alpha = \n \n The <unk> river flows . \n", encoding="utf-8")
    (sentence,), = read_documents(str(path), wikitext=True)
    assert sentence == "The [UNK] river flows ."
    tokenizer = Tokenizer.train_wordpiece([sentence] * 5, 60, lowercase=True)
    assert tokenizer(sentence) == ["the", "[UNK]", "river", "flows", "."]


def test_mlm_loss_and_accuracy_on_a_hand_example():
    # two sequences; positions (0,1), (0,2) and (1,1) are predicted, vocabulary of 3
    targets = torch.tensor([[IGNORE, 2, 0], [IGNORE, 1, IGNORE]])
    logits = torch.log(torch.tensor([[0.2, 0.2, 0.6], [0.5, 0.25, 0.25], [0.7, 0.2, 0.1]]))  # [N=3, V]
    nsp = torch.log(torch.tensor([[0.9, 0.1], [0.4, 0.6]]))
    is_next = torch.tensor([0, 0])
    out = PretrainingOutput(logits, nsp)
    mlm, nsp_loss, counts = sequence_losses(out, targets, is_next)
    assert counts.tolist() == [2, 1]
    assert mlm.tolist() == pytest.approx([-(math.log(0.6) + math.log(0.5)) / 2, -math.log(0.2)], rel=1e-5)
    assert nsp_loss.tolist() == pytest.approx([-math.log(0.9), -math.log(0.4)], rel=1e-5)
    gold = targets[targets != IGNORE]
    sums = {"mlm_nll": float(-(math.log(0.6) + math.log(0.5) + math.log(0.2))),
            "mlm_correct": int((logits.argmax(-1) == gold).sum()), "positions": 3,
            "nsp_nll": float(-(math.log(0.9) + math.log(0.4))), "nsp_correct": int((nsp.argmax(-1) == is_next).sum()),
            "nsp_sequences": 2}
    metrics = pretraining_metrics(sums, 2, nsp=True)
    assert metrics["mlm_accuracy"] == pytest.approx(2 / 3)  # argmax 2, 0, 0 against 2, 0, 1
    assert metrics["nsp_accuracy"] == pytest.approx(1 / 2)
    assert metrics["loss"] == pytest.approx(metrics["mlm_loss"] + metrics["nsp_loss"])


def _task(tmp_path, dynamic: bool):
    # the cache keeps the trained WordPiece, as a resumed run finds it (the library's training may
    # break ties differently from one training to the next)
    import random

    from textnn.resolve import config_from_dict
    from textnn.tasks.pretraining import PretrainingTask

    rng = random.Random(0)
    words = "river city music team film war king song game north".split()
    docs = ["\n".join(" ".join(rng.choice(words) for _ in range(7)).capitalize() + " ." for _ in range(5))
            for _ in range(6)]
    path = tmp_path / "text.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    config = config_from_dict({"task": "pretraining", "model": {"name": "bert", "preset": "tiny"},
                               "data": {"train": str(path), "wordpiece_vocab_size": 50, "max_length": 24,
                                        "dynamic_masking": dynamic, "nsp": not dynamic},
                               "train": {"seed": 5}}, "test")
    return PretrainingTask.from_data(config)


def _masks(task, epoch: int) -> list:
    # per instance, whatever order the epoch's batches come in
    return [task._masked(task.splits["train"], epoch)[i] for i in range(len(task.splits["train"].instances))]


def test_the_task_keeps_static_masks_and_redraws_dynamic_ones_per_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTNN_CACHE", str(tmp_path / "cache"))
    static, dynamic = _task(tmp_path, dynamic=False), _task(tmp_path, dynamic=True)
    assert _masks(static, 1) == _masks(static, 2) == _masks(static, 0)
    assert _masks(dynamic, 1) != _masks(dynamic, 2)
    assert _masks(dynamic, 2) == _masks(_task(tmp_path, dynamic=True), 2)  # a fresh process (a resume) agrees
    assert all(x.is_next == -1 and set(x.segments) == {0} for x in dynamic.splits["train"].instances)
    first = [b.targets for b in dynamic.train_batches(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, [b.targets for b in dynamic.train_batches(3)]))
