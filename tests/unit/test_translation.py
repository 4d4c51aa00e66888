"""The translation task's parts: parallel readers, token budgets, BPE round trips, the loss, BLEU, the schedule."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import pytest
import torch

from textnn import registry
from textnn.config import TrainConfig
from textnn.data.batching import token_budget_batches
from textnn.data.parallel import detokenize_words, read_parallel
from textnn.errors import TextnnError
from textnn.front import options_for
from textnn.generation.decoding import DecodingConfig, greedy
from textnn.metrics.bleu import corpus_scores
from textnn.resolve import config_from_dict
from textnn.tasks.translation import BOS, TranslationTask, label_smoothed_nll
from textnn.training.optim import lr_factor

SOURCE = ["ein Hund läuft.", "eine Katze sitzt auf dem Tisch.", "zwei Männer spielen Fußball!", "der Ball ist rot."]
TARGET = ["a dog runs.", "a cat sits on the table.", "two men play soccer!", "the ball is red."]


def write_pair(folder, name, source, target, gz=False):
    for lang, lines in (("de", source), ("en", target)):
        data = ("\n".join(lines) + "\n").encode("utf-8")
        path = folder / f"{name}.{lang}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(data) if gz else data)
    return str(folder / name)


# --- readers -------------------------------------------------------------------------------------------

def test_parallel_files_plain_and_gzipped_give_the_same_pairs(tmp_path):
    plain = read_parallel(write_pair(tmp_path, "a", SOURCE, TARGET), "parallel", "de", "en")
    zipped = read_parallel(write_pair(tmp_path, "b", SOURCE, TARGET, gz=True), "parallel", "de", "en")
    assert plain.source == zipped.source == SOURCE and plain.target == zipped.target == TARGET
    assert plain.lines == [1, 2, 3, 4]


def test_different_line_counts_name_both_files_and_the_first_unmatched_line(tmp_path):
    prefix = write_pair(tmp_path, "train", SOURCE, TARGET[:3])
    with pytest.raises(TextnnError) as err:
        read_parallel(prefix, "parallel", "de", "en")
    message = str(err.value)
    assert "train.de has 4 lines" in message and "train.en has 3" in message and "train.en:4" in message
    assert "\n" not in message


def test_a_side_left_empty_is_an_error_naming_file_and_line_or_skipped_and_counted(tmp_path, capsys):
    target = list(TARGET)
    target[2] = "  "
    prefix = write_pair(tmp_path, "train", SOURCE, target)
    with pytest.raises(TextnnError, match=r"train\.en:3: empty target side .*train\.de has text on line 3"):
        read_parallel(prefix, "parallel", "de", "en")
    kept = read_parallel(prefix, "parallel", "de", "en", skip_bad=True)
    assert kept.source == [SOURCE[0], SOURCE[1], SOURCE[3]] and kept.lines == [1, 2, 4]
    assert kept.skipped == {"empty on one side": [3]}
    assert "skipped 1 of 4 pairs" in capsys.readouterr().err


def test_tsv_columns_by_name_and_a_missing_column(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("en\tde\n" + "".join(f"{t}\t{s}\n" for s, t in zip(SOURCE, TARGET)), encoding="utf-8")
    pairs = read_parallel(str(path), "tsv", "de", "en")
    assert pairs.source == SOURCE and pairs.target == TARGET and pairs.lines == [2, 3, 4, 5]
    with pytest.raises(TextnnError, match="no column 'fr'"):
        read_parallel(str(path), "tsv", "fr", "en")
    path.write_text("de\ten\nnur eine Spalte\n", encoding="utf-8")
    with pytest.raises(TextnnError, match=r"pairs\.tsv:2: 1 tab-separated column"):
        read_parallel(str(path), "tsv", "de", "en")


def test_a_missing_column_message_stays_short_whatever_the_header_holds(tmp_path):
    """A header line of thousands of cells (or one huge cell) is named by its first few cells, cut short."""
    path = tmp_path / "pairs.tsv"
    path.write_text("\t".join(f"col{i}" for i in range(3000)) + "\n" + "x" * 100_000 + "\tb\n", encoding="utf-8")
    with pytest.raises(TextnnError) as err:
        read_parallel(str(path), "tsv", "de", "en")
    assert "no column 'de'" in str(err.value) and "'col0', 'col1'" in str(err.value) and "2992 more" in str(err.value)
    assert len(str(err.value)) < 500
    path.write_text("x" * 100_000 + "\ty\nein\tone\n", encoding="utf-8")
    with pytest.raises(TextnnError) as err:
        read_parallel(str(path), "tsv", "y", "en")
    assert "no column 'en'" in str(err.value) and len(str(err.value)) < 500


def test_missing_side_file_names_what_was_looked_for(tmp_path):
    with pytest.raises(TextnnError, match=r"nope\.de: not found \(nor .*nope\.de\.gz\)"):
        read_parallel(str(tmp_path / "nope"), "parallel", "de", "en")


# --- batches -------------------------------------------------------------------------------------------

def test_token_budget_batches_cover_every_example_once_within_the_budget():
    lengths = [(i * 37) % 23 + 1 for i in range(500)] + [90]  # one longer than the budget
    budget = 64
    for shuffle in (False, True):
        batches = token_budget_batches(lengths, budget, shuffle=shuffle, seed=3)
        assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
        for batch in batches:
            padded = len(batch) * max(lengths[i] for i in batch)
            assert padded <= budget or len(batch) == 1
        assert max(len(batch) for batch in batches) > 5  # short sentences come many to a batch
    assert token_budget_batches(lengths, budget, True, seed=3) == token_budget_batches(lengths, budget, True, seed=3)
    assert token_budget_batches(lengths, budget, True, seed=3) != token_budget_batches(lengths, budget, True, seed=4)
    ordered = token_budget_batches(lengths, budget, shuffle=False)
    flat = [lengths[i] for batch in ordered for i in batch]
    assert flat == sorted(flat)


# --- tokenization ----------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _tiny_family(monkeypatch):
    """A test-only encoder-decoder under a registry name, for these tests alone."""
    monkeypatch.setitem(registry.ENCODERS, "tiny_mt", "tests.unit.tiny_encoder_decoder:TinyEncoderDecoder")


def _task(tmp_path, **data):
    prefix = write_pair(tmp_path, "train", SOURCE * 5, TARGET * 5)
    raw = {"task": "translation", "data": {"train": prefix, "bpe_vocab_size": 120, **data},
           "model": {"name": "tiny_mt"}, "train": {"batch_size": 4}}
    return TranslationTask.from_data(config_from_dict(raw, "test"))


@pytest.mark.parametrize("joint", [True, False])
def test_bpe_round_trip_gives_back_the_raw_text(tmp_path, joint):
    task = _task(tmp_path, joint_vocab=joint)
    assert (task.source_vocab is task.target_vocab) == joint
    for line, ids in zip(TARGET, task.target_ids(TARGET)):
        assert ids[0] == task.target_vocab.stoi[BOS]
        assert task.detokenize(ids) == line  # specials dropped, pieces decoded byte for byte
    unseen = "Ein völlig neuer Satz, 42 Wörter?"
    assert task.source_tokenizer.join(task.source_vocab.decode(task.source_ids([unseen])[0][:-1])) == unseen
    run = tmp_path / "run"
    run.mkdir()
    task.save(run)
    again = TranslationTask.from_run(run, task.config)
    assert again.target_ids(TARGET) == task.target_ids(TARGET)
    assert (run / "target_vocab.json").is_file() != joint


def test_a_tsv_run_reads_its_columns_and_skips_long_training_pairs(tmp_path, capsys):
    path = tmp_path / "train.tsv"
    rows = "".join(f"{i}\t{t}\t{s}\n" for i, (s, t) in enumerate(zip(SOURCE * 3, TARGET * 3)))
    path.write_text("id\ten\tde\n" + rows, encoding="utf-8")
    data = {"format": "tsv", "train": str(path), "dev": str(path), "tokenizer": "whitespace", "max_length": 4}
    raw = {"task": "translation", "data": data, "model": {"name": "tiny_mt"}}
    task = TranslationTask.from_data(config_from_dict(raw, "test"))
    assert len(task.splits["train"].source) == 9  # the 6-word pairs are left out of training, and counted
    assert "skipped 3 of 12 training pairs with more than 4 tokens on a side (lines 3, 7, 11)" in capsys.readouterr().err
    dev = task.splits["dev"]
    assert len(dev.source) == 12 and max(len(ids) for ids in dev.source) == 5  # cut to 4 tokens + </s>
    assert dev.references[1] == TARGET[1]  # scored against the whole raw reference


def test_word_level_detokenisation_removes_the_spaces_around_punctuation(tmp_path):
    assert detokenize_words(["a", "dog", "runs", "."]) == "a dog runs."
    assert detokenize_words(["it", "'s", "(", "red", ")", "!"]) == "it's (red)!"
    task = _task(tmp_path, tokenizer="word")
    assert [task.detokenize(ids) for ids in task.target_ids(TARGET)] == TARGET


# --- loss ------------------------------------------------------------------------------------------------

def test_label_smoothed_loss_equals_the_hand_computation():
    logits = torch.tensor([[[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]]])  # [B=1, T=2, V=3]
    targets = torch.tensor([[1, 0]])
    mask = torch.tensor([[True, False]])  # the second position is padding
    eps = 0.1
    z = math.log(math.exp(1.0) + math.exp(2.0) + math.exp(0.5))
    log_p = [1.0 - z, 2.0 - z, 0.5 - z]
    expected_nll = -log_p[1]
    expected = (1 - eps) * expected_nll + eps * -sum(log_p) / 3
    smoothed, nll = label_smoothed_nll(logits, targets, mask, eps)
    assert smoothed.item() == pytest.approx(expected, rel=1e-6)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)
    plain, _ = label_smoothed_nll(logits, targets, mask, 0.0)
    assert plain.item() == pytest.approx(expected_nll, rel=1e-6)


# --- the model and the decoder adapter --------------------------------------------------------------------

def test_step_by_step_feeding_matches_the_full_pass_and_greedy_matches_its_argmax(tmp_path):
    torch.manual_seed(0)
    task = _task(tmp_path)
    model = task.build_model()
    batch = task.train_batches(0)[0]
    model.eval()
    full = model(batch.src_ids, batch.src_mask, batch.tgt_in, batch.tgt_mask).logits
    model.teacher_forcing = 1.0  # the step path with every reference token fed
    stepped = model._fed_own_predictions(model.encoder.encode(batch.src_ids, batch.src_mask), batch.tgt_in)
    mask = batch.tgt_mask
    assert torch.allclose(full[mask], stepped[mask], atol=1e-5)

    model.teacher_forcing = 0.0  # every position after <s> fed the previous step's own argmax
    own = model._fed_own_predictions(model.encoder.encode(batch.src_ids, batch.src_mask), batch.tgt_in)
    fed = torch.cat([batch.tgt_in[:, :1], own.argmax(-1)[:, :-1]], dim=1)
    again = model(batch.src_ids, batch.src_mask, fed, torch.ones_like(fed, dtype=torch.bool)).logits
    assert torch.allclose(own, again, atol=1e-5)

    bos = task.target_vocab.stoi[BOS]
    prefix = torch.full((batch.src_ids.size(0), 1), bos)
    found = greedy(model, batch, prefix, DecodingConfig(max_tokens=6, stop_at_eos=False))
    tokens = torch.tensor([h[0].tokens for h in found])  # [B, 6]
    forced = model(batch.src_ids, batch.src_mask, torch.cat([prefix, tokens[:, :-1]], 1),
                   torch.ones_like(tokens, dtype=torch.bool)).logits
    assert torch.equal(forced.argmax(-1), tokens)


def test_decoding_options_beam_length_penalty_and_nbest(tmp_path):
    """The command's DecodingConfig (built once by from_flags) gets the head's length rule, nothing else."""
    task = _task(tmp_path)
    greedy = task.decoding_config()
    assert greedy.method == "greedy" and greedy.max_len_a == task.config.head.max_len_a
    beam = task.decoding_config(DecodingConfig.from_flags(beam=3, length_penalty=1.0, n_best=2))
    assert (beam.method, beam.beam_size, beam.length_penalty, beam.n_best) == ("beam", 3, 1.0, 2)
    assert (beam.max_len_a, beam.max_len_b) == (task.config.head.max_len_a, task.config.head.max_len_b)
    with pytest.raises(TextnnError, match="add --beam K"):
        DecodingConfig.from_flags(n_best=2)
    with pytest.raises(TextnnError, match="--streams: does not apply to task translation"):
        options_for(task, streams=4)


def test_tied_output_layer_shares_the_target_embedding(tmp_path):
    task = _task(tmp_path)
    model = task.build_model()
    assert model.head.decoder.weight is model.encoder.output_embedding()
    task.config.head.tie = False
    assert task.build_model().head.decoder.weight is not task.build_model().encoder.output_embedding()


# --- metrics ---------------------------------------------------------------------------------------------

def test_bleu_and_chrf_equal_the_sacrebleu_command_line(tmp_path):
    references = ["A dog runs across the green field.", "Two men are playing soccer in the park!",
                  "The red ball lies under a table.", "A woman, smiling, holds her child."]
    hypotheses = ["A dog runs over the green field.", "Two men play soccer in a park!",
                  "The red ball is under the table.", "A smiling woman holds her child."]
    (tmp_path / "ref.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
    (tmp_path / "hyp.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "sacrebleu", "ref.txt", "-i", "hyp.txt", "-m", "bleu", "chrf",
                           "--score-only", "--width", "6"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    bleu, chrf = json.loads(proc.stdout)
    ours = corpus_scores(hypotheses, references)
    assert ours["bleu"] == pytest.approx(bleu, abs=1e-5) and ours["chrf"] == pytest.approx(chrf, abs=1e-5)
    assert 0 < ours["bleu"] < 100 and ours["bleu_signature"].startswith("nrefs:1|case:mixed")
    with pytest.raises(TextnnError, match="3 translations for 4 references"):
        corpus_scores(hypotheses[:3], references)


# --- schedule --------------------------------------------------------------------------------------------

def test_inverse_sqrt_schedule_is_vaswani_equation_3_divided_by_its_peak():
    warmup, d_model = 40, 512
    cfg = TrainConfig(scheduler="inverse_sqrt", warmup_steps=warmup)

    def vaswani(step_number: int) -> float:  # Vaswani et al. 2017, eq. 3 (steps counted from 1)
        return d_model ** -0.5 * min(step_number ** -0.5, step_number * warmup ** -1.5)

    peak = vaswani(warmup)
    for step in (0, 1, 19, 39, 40, 100, 159, 1000):
        assert lr_factor(step, 10, cfg) == pytest.approx(vaswani(step + 1) / peak)
    assert lr_factor(warmup - 1, 0, cfg) == pytest.approx(1.0)  # the peak at the end of the warmup
    assert lr_factor(4 * warmup - 1, 0, cfg) == pytest.approx(0.5)  # then 1 / sqrt(step)
    with pytest.raises(TextnnError, match="train.warmup_steps"):
        TrainConfig(scheduler="inverse_sqrt", warmup_steps=0)
