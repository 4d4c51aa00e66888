"""The encoder-decoder families (models/seq2seq.py, models/transformer_mt.py) on their tiny presets.

For several arrangements of each family: shapes and a finite loss through a linear output layer, a
gradient for every parameter, teacher-forced `decode` equal to token-by-token `step` decoding, a
padded batch equal to each sentence alone, `reorder` taking the right rows, and beam search from
generation/decoding.py driving the family (beam 1 without length penalty = greedy; the best
hypothesis' score equal to its teacher-forced log-probability).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textnn import registry
from textnn.errors import TextnnError
from textnn.generation.decoding import DecodingConfig, beam_search, greedy
from textnn.models.base import DecoderOutput, InputSpec

SRC_V, TGT_V, PAD, BOS, EOS = 23, 19, 0, 1, 2

# (family, overrides of its tiny preset)
ARRANGEMENTS = [
    ("seq2seq", {}),  # Bahdanau: additive, previous state attends, GRU
    ("seq2seq", {"attention": "none"}),  # plain encoder-decoder
    ("seq2seq", {"attention": "none", "context_every_step": True}),  # Cho et al. 2014
    ("seq2seq", {"attention": "none", "cell": "lstm", "bridge": False, "bidirectional": False, "encoder_hidden": 12,
                 "reverse_source": True}),  # Sutskever et al. 2014
    ("seq2seq", {"attention": "general", "arrangement": "luong", "cell": "lstm", "input_feeding": True}),
    ("seq2seq", {"attention": "dot", "arrangement": "luong"}),  # fused decoder, attention over all states
    ("seq2seq", {"attention": "location", "arrangement": "luong", "input_feeding": True}),
    ("seq2seq", {"attention": "cosine", "reverse_source": True}),
    ("seq2seq", {"attention": "scaled_dot", "num_layers": 1}),
    ("transformer_mt", {}),  # post-LN, as the paper
    ("transformer_mt", {"pre_ln": True, "activation": "gelu"}),
    ("transformer_mt", {"share_embeddings": True, "n_layers": 1}),  # built on one joint vocabulary (`build`)
]
IDS = [f"{family}-{'-'.join(f'{k}={v}' for k, v in over.items()) or 'tiny'}" for family, over in ARRANGEMENTS]


def build(family: str, overrides: dict, joint: bool = False, seed: int = 0) -> nn.Module:
    cls = registry.encoder_class(family)
    torch.manual_seed(seed)
    source = InputSpec(vocab_size=SRC_V, pad_id=PAD)
    joint = joint or overrides.get("share_embeddings", False)
    target = source if joint else InputSpec(vocab_size=TGT_V, pad_id=PAD)
    return cls(cls.presets["tiny"].options(**overrides), source, target)


def padded(lengths: list[int], vocab: int, seed: int, first: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids [B, max(lengths)] in 3..vocab-1 (BOS at position 0 when `first`), PAD after each length; mask."""
    g = torch.Generator().manual_seed(seed)
    total = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), total), generator=g)
    if first is not None:
        ids[:, 0] = first
    mask = torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    return ids.masked_fill(~mask, PAD), mask


def batch() -> tuple[torch.Tensor, ...]:
    src, src_mask = padded([7, 4, 1, 5], SRC_V, seed=1)
    tgt, tgt_mask = padded([6, 6, 3, 2], TGT_V, seed=2, first=BOS)
    return src, src_mask, tgt, tgt_mask


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_shapes_finite_loss_and_a_gradient_for_every_parameter(family, overrides):
    model = build(family, overrides).train()
    head = nn.Linear(model.token_size, TGT_V)
    src, src_mask, tgt, tgt_mask = batch()
    out = model.decode(model.encode(src, src_mask), tgt, tgt_mask)
    assert isinstance(out, DecoderOutput) and out.attention is None
    assert out.tokens.shape == (4, tgt.size(1), model.token_size)
    logits = head(out.tokens[:, :-1])  # predict token t + 1 from position t
    loss = F.cross_entropy(logits[tgt_mask[:, 1:]], tgt[:, 1:][tgt_mask[:, 1:]])
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, f"{name} gets no gradient"


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_teacher_forced_decode_equals_token_by_token_steps(family, overrides):
    model = build(family, overrides).eval()
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, tgt, tgt_mask).tokens  # [B, T, D]
        state, steps = model.start(memory), []
        for t in range(tgt.size(1)):
            last, state = model.step(tgt[:, t:t + 1], state)
            steps.append(last)
        torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=1e-5, atol=1e-5)
        # Several tokens in one step: the state of the last, and the same state after it.
        last, state = model.step(tgt[:, :3], model.start(memory))
        torch.testing.assert_close(last, full[:, 2], rtol=1e-5, atol=1e-5)
        last, _ = model.step(tgt[:, 3:4], state)
        torch.testing.assert_close(last, full[:, 3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_a_padded_batch_equals_each_sentence_alone(family, overrides):
    model = build(family, overrides).eval()
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        together = model.decode(model.encode(src, src_mask), tgt, tgt_mask, need_weights=True)
        for row in range(src.size(0)):
            s, t = int(src_mask[row].sum()), int(tgt_mask[row].sum())
            one_src, one_tgt = src[row:row + 1, :s], tgt[row:row + 1, :t]
            alone = model.decode(model.encode(one_src, torch.ones_like(one_src, dtype=torch.bool)), one_tgt,
                                 torch.ones_like(one_tgt, dtype=torch.bool), need_weights=True)
            torch.testing.assert_close(together.tokens[row, :t], alone.tokens[0], rtol=1e-5, atol=1e-5)
            for name, weights in (together.attention or {}).items():
                expected = alone.attention[name][0]  # [T, S] or [H, T, S]
                torch.testing.assert_close(weights[row, ..., :t, :s], expected, rtol=1e-5, atol=1e-5)
                assert (weights[row, ..., :t, s:] == 0).all()  # padded source positions get nothing


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_attention_weights_cover_the_source_when_asked_for(family, overrides):
    model = build(family, overrides).eval()
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        out = model.decode(model.encode(src, src_mask), tgt, tgt_mask, need_weights=True)
    if overrides.get("attention") == "none":
        assert out.attention is None
        return
    assert out.attention
    for weights in out.attention.values():
        assert weights.shape[0] == 4 and weights.shape[-2:] == (tgt.size(1), src.size(1))
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_reorder_takes_the_rows_asked_for(family, overrides):
    model = build(family, overrides).eval()
    src, src_mask, tgt, _ = batch()
    indices = torch.tensor([2, 0, 0, 3, 1])
    with torch.no_grad():
        state = model.start(model.encode(src, src_mask))
        _, state = model.step(tgt[:, :2], state)
        expected, _ = model.step(tgt[:, 2:3], state)  # [B, D]
        got, _ = model.step(tgt[indices, 2:3], model.reorder(state, indices))
    torch.testing.assert_close(got, expected[indices], rtol=1e-6, atol=1e-6)


class Translator(nn.Module):
    """The adapter a search drives: a family and a linear output layer behind start / step / reorder."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        torch.manual_seed(5)
        self.head = nn.Linear(model.token_size, TGT_V)

    def start(self, batch: tuple[torch.Tensor, torch.Tensor]) -> object:
        return self.model.start(self.model.encode(*batch))

    def step(self, tokens: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        states, state = self.model.step(tokens, state)
        return self.head(states), state

    def reorder(self, state: object, indices: torch.Tensor) -> object:
        return self.model.reorder(state, indices)

    def log_prob(self, src: torch.Tensor, src_mask: torch.Tensor, row: int, tokens: list[int]) -> float:
        """Teacher-forced log-probability of `tokens` then EOS for sentence `row`, from `decode`."""
        ids = torch.tensor([[BOS, *tokens]])
        s = int(src_mask[row].sum())
        memory = self.model.encode(src[row:row + 1, :s], src_mask[row:row + 1, :s])
        logits = self.head(self.model.decode(memory, ids, torch.ones_like(ids, dtype=torch.bool)).tokens)
        logits[..., PAD] = float("-inf")  # the searches ban padding, so its probability is renormalised away
        targets = torch.tensor([*tokens, EOS])
        return float(torch.log_softmax(logits[0], dim=-1).gather(1, targets[:, None]).sum())


@pytest.mark.parametrize("family,overrides", ARRANGEMENTS, ids=IDS)
def test_beam_search_drives_the_family(family, overrides):
    translator = Translator(build(family, overrides)).eval()
    src, src_mask, _, _ = batch()
    prefix = torch.full((src.size(0), 1), BOS)
    common = dict(stop_ids=[EOS], banned_ids=[PAD])
    with torch.no_grad():
        best = beam_search(translator, (src, src_mask), prefix,
                           DecodingConfig(method="beam", beam_size=3, n_best=2, max_tokens=8, length_penalty=0.0),
                           **common)
        assert len(best) == 4 and all(1 <= len(found) <= 2 for found in best)
        for row, found in enumerate(best):
            assert found[0].score >= found[-1].score
            if found[0].finished:  # its score is the log-probability decode gives the same tokens
                assert found[0].score == pytest.approx(translator.log_prob(src, src_mask, row, found[0].tokens),
                                                       abs=1e-4)
        one = beam_search(translator, (src, src_mask), prefix,
                          DecodingConfig(method="beam", beam_size=1, max_tokens=8, length_penalty=0.0), **common)
        plain = greedy(translator, (src, src_mask), prefix, DecodingConfig(max_tokens=8), **common)
    assert [h[0].tokens for h in one] == [h[0].tokens for h in plain]


# ------------------------------------------------------------------------------------------ seq2seq only

def test_source_reversal_equals_reading_the_reversed_sentence():
    from textnn.models.seq2seq import reverse_within

    src, src_mask, tgt, tgt_mask = batch()
    flipped = reverse_within(src, src_mask)
    assert flipped[1, :4].tolist() == src[1, :4].flip(0).tolist() and (flipped[1, 4:] == PAD).all()
    torch.testing.assert_close(reverse_within(flipped, src_mask), src, rtol=0, atol=0)
    over = {"attention": "none", "cell": "lstm", "bridge": False, "bidirectional": False, "encoder_hidden": 12}
    reversing, plain = build("seq2seq", {**over, "reverse_source": True}).eval(), build("seq2seq", over).eval()
    with torch.no_grad():
        expected = plain.decode(plain.encode(flipped, src_mask), tgt, tgt_mask).tokens
        got = reversing.decode(reversing.encode(src, src_mask), tgt, tgt_mask).tokens
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_the_context_reaches_every_step_only_in_chos_arrangement():
    """Cho et al. 2014: changing the source summary c changes every output; without it only the start state does."""
    src, src_mask, tgt, tgt_mask = batch()
    for context_every_step in (True, False):
        model = build("seq2seq", {"attention": "none", "context_every_step": context_every_step}).eval()
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            assert (memory.context is not None) == context_every_step
            if context_every_step:
                base = model.decode(memory, tgt, tgt_mask).tokens
                memory.context = memory.context + 1.0
                changed = model.decode(memory, tgt, tgt_mask).tokens
                assert (changed - base).abs().amax(dim=-1).min() > 0  # every position moved


@pytest.mark.parametrize("overrides,message", [
    ({"attention": "dot", "encoder_hidden": 5}, "model.attention"),
    ({"attention": "none", "input_feeding": True}, "model.input_feeding"),
    ({"input_feeding": True}, "model.input_feeding"),  # tiny is Bahdanau's arrangement
    ({"context_every_step": True}, "model.context_every_step"),
    ({"bridge": False}, "model.bridge"),
    ({"cell": "rnn"}, "model.cell"),
    ({"attention": "bilinear"}, "model.attention"),
    ({"dropout": 1.0}, "model.dropout"),
    ({"num_layers": 0}, "model.num_layers"),
])
def test_bad_seq2seq_settings_are_one_line_errors(overrides, message):
    cls = registry.encoder_class("seq2seq")
    with pytest.raises(TextnnError, match=message):
        cls.presets["tiny"].options(**overrides)


def test_location_attention_refuses_a_source_longer_than_its_positions():
    model = build("seq2seq", {"attention": "location", "max_source_positions": 5}).eval()
    src, src_mask, tgt, tgt_mask = batch()
    with pytest.raises(TextnnError, match="max_source_positions = 5"):
        model.decode(model.encode(src, src_mask), tgt, tgt_mask)
    assert type(model).max_length(model.cfg) == 5


@pytest.mark.parametrize("family", ["seq2seq", "transformer_mt"])
def test_every_preset_builds(family):
    cls = registry.encoder_class(family)
    assert {"tiny", "paper"} <= set(cls.presets)
    for name, preset in cls.presets.items():
        assert isinstance(preset.model, cls.config_class), name  # a bad preset raises when it is made


@pytest.mark.parametrize("family", ["seq2seq", "transformer_mt"])
def test_the_encoder_tasks_refuse_an_encoder_decoder(family):
    from textnn.resolve import config_from_dict

    for task in ("classification", "tagging", "language_modeling"):
        assert family not in registry.models_for(task)
    raw = {"task": "classification", "data": {"train": "t.tsv"}, "model": {"name": family}}
    with pytest.raises(TextnnError, match=f"{family} cannot serve task classification"):
        config_from_dict(raw, "x.yaml")


# ------------------------------------------------------------------------------------ transformer_mt only

def test_shared_embeddings_are_one_matrix_and_need_one_vocabulary():
    model = build("transformer_mt", {"share_embeddings": True})
    assert model.src_embedding.weight is model.tgt_embedding.weight is model.output_embedding()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for _, p in model.named_parameters())
    tied = build("transformer_mt", {})
    assert tied.output_embedding() is tied.tgt_embedding.weight and tied.src_embedding is not tied.tgt_embedding
    separate = build("transformer_mt", {"tie_output": False})
    assert separate.output_embedding() is None and separate.src_embedding is not separate.tgt_embedding
    cls = registry.encoder_class("transformer_mt")
    cfg = cls.presets["tiny"].options(share_embeddings=True)
    with pytest.raises(TextnnError, match="share_embeddings"):
        cls(cfg, InputSpec(vocab_size=SRC_V, pad_id=PAD), InputSpec(vocab_size=TGT_V, pad_id=PAD))
    with pytest.raises(TextnnError, match="model.tie_output"):
        cls.presets["tiny"].options(share_embeddings=True, tie_output=False)


def test_the_memory_is_projected_once_in_start_not_at_every_step():
    model = build("transformer_mt", {}).eval()
    src, src_mask, tgt, _ = batch()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        state = model.start(memory)
        expected, _ = model.step(tgt[:, :3], state)
        # Steps read the keys and values `start` projected: spoiling the memory afterwards changes nothing.
        state.memory.states = torch.full_like(memory.states, float("nan"))
        got, state = model.step(tgt[:, :3], state)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert state.offset == 3 and all(c.length == 3 for c in state.self_caches)


def test_the_decoder_is_causal_and_reads_the_source():
    model = build("transformer_mt", {}).eval()
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        base = model.decode(memory, tgt, tgt_mask).tokens
        later = tgt.clone()
        later[:, 3:] = 5  # a change at position 3 leaves positions 0..2 alone
        changed = model.decode(memory, later, tgt_mask).tokens
        torch.testing.assert_close(changed[:, :3], base[:, :3], rtol=0, atol=0)
        assert not torch.allclose(changed[0, 3:], base[0, 3:])
        other = model.decode(model.encode(src.roll(1, dims=0), src_mask.roll(1, dims=0)), tgt, tgt_mask).tokens
        assert not torch.allclose(other[0], base[0])
