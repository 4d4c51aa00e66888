"""ELMo's biLM on its tiny preset: the harness checks (shapes, finite loss, a gradient for every parameter,
save/load round trip, eval determinism, padded batch == each sentence alone), the highway layer by hand,
the byte input, and what makes it two language models: the forward LM never sees the words to the
right of a position, the backward LM never the words to its left, and evaluation reports both."""

from __future__ import annotations

import math

import pytest
import torch

from textnn import registry
from textnn.models.base import TokenFeatures
from textnn.models.elmo import BEGIN_OF_WORD, BYTE_OFFSET, END_OF_WORD, ELMo, reverse_padded, word_byte_ids
from textnn.modules.highway import Highway
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import (BidirectionalLanguageModel, LanguageModelingHead, LanguageModelingTask,
                                            language_model)
from tests.models.lm_checks import assert_eval_deterministic_and_train_uses_dropout, assert_save_load_round_trip

WORDS = ["<pad>", "<unk>", "<eos>", *"the a cat dog sat ran on under mat rug and then über naïve x".split()]
VOCAB = len(WORDS)


def tiny(**overrides):
    return ELMo.presets["tiny"].options(**overrides)


def build(seed: int = 0, softmax: str = "adaptive") -> BidirectionalLanguageModel:
    torch.manual_seed(seed)
    head = LanguageModelingHead(softmax=softmax, cutoffs=[6], div_value=2.0)
    return language_model("elmo", tiny(), VOCAB, 0, head, words=WORDS)


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_registered_and_served_by_language_modelling_with_the_adaptive_softmax_by_default():
    assert registry.encoder_class("elmo") is ELMo and "elmo" in registry.models_for("language_modeling")
    model = language_model("elmo", tiny(), VOCAB, 0, LanguageModelingHead(cutoffs=[6]), words=WORDS)  # softmax auto
    assert type(model.head).__name__ == "AdaptiveLMHead"
    full = language_model("elmo", tiny(), VOCAB, 0, LanguageModelingHead(softmax="full"), words=WORDS)
    assert full.head.decoder.in_features == tiny().projection_dim  # one direction's states: the head is shared
    assert {"tiny", "small", "paper"} <= set(ELMo.presets)
    paper = ELMo.presets["paper"].options()
    assert sum(n for _, n in paper.filters) == 2048 and paper.projection_dim == 512 and paper.hidden_size == 4096


def test_words_become_bytes_between_markers_cut_at_max_chars():
    out = word_byte_ids(["ab", "über", "x" * 30], max_chars=8)
    assert out.shape == (3, 8)
    assert out[0].tolist() == [BEGIN_OF_WORD, ord("a") + BYTE_OFFSET, ord("b") + BYTE_OFFSET, END_OF_WORD, 0, 0, 0, 0]
    assert out[1, 1:3].tolist() == [b + BYTE_OFFSET for b in "ü".encode("utf-8")]  # two bytes for one character
    assert out[2, -1] == END_OF_WORD and (out[2, 1:-1] == ord("x") + BYTE_OFFSET).all()  # cut to 6 bytes + markers


def test_highway_matches_a_hand_computation():
    torch.manual_seed(0)
    layer = Highway(3, 1)
    x = torch.randn(4, 3)
    w, b = layer.layers[0].weight, layer.layers[0].bias  # [6, 3], [6]: transform rows, then gate rows
    expected = []
    for row in x.tolist():
        out = []
        for i in range(3):
            h = max(0.0, sum(w[i, j].item() * row[j] for j in range(3)) + b[i].item())
            t = 1 / (1 + math.exp(-(sum(w[3 + i, j].item() * row[j] for j in range(3)) + b[3 + i].item())))
            out.append(t * h + (1 - t) * row[i])
        expected.append(out)
    torch.testing.assert_close(layer(x), torch.tensor(expected), rtol=1e-5, atol=1e-6)
    assert torch.all(b[3:] == -2.0)  # starts near the identity (carry)


def test_reverse_padded_reverses_the_real_part_only():
    x = torch.arange(10.0).view(2, 5, 1)
    out = reverse_padded(x, torch.tensor([5, 3]))
    assert out[0, :, 0].tolist() == [4, 3, 2, 1, 0] and out[1, :, 0].tolist() == [7, 6, 5, 8, 9]
    torch.testing.assert_close(reverse_padded(out, torch.tensor([5, 3])), x)


def _states(model, window: torch.Tensor, lengths: torch.Tensor):
    return model.encoder.lm_states(model.word_bytes[window], lengths)


def test_forward_lm_ignores_the_right_and_backward_lm_ignores_the_left():
    model = build().eval()
    window = ids(2, 9)  # s_0 .. s_8: T = 8 predictions per direction
    lengths = torch.tensor([8, 8])
    t = 4
    right, left = window.clone(), window.clone()
    right[:, t + 2] = (right[:, t + 2] % (VOCAB - 1)) + 1  # another word at s_{t+2}
    left[:, t] = (left[:, t] % (VOCAB - 1)) + 1  # another word at s_t
    fwd, bwd, _ = _states(model, window, lengths)
    fwd_r, bwd_r, _ = _states(model, right, lengths)
    fwd_l, bwd_l, _ = _states(model, left, lengths)
    # forward[:, t] has read s_0 .. s_t; a change at s_{t+2} leaves it (and all before it) alone ...
    torch.testing.assert_close(fwd_r[:, :t + 2], fwd[:, :t + 2], rtol=0, atol=0)
    assert not torch.allclose(fwd_r[:, t + 2:], fwd[:, t + 2:])  # ... and it does reach the later ones
    # backward[:, t] has read s_{t+1} .. s_T; a change at s_t leaves it (and all after it) alone ...
    torch.testing.assert_close(bwd_l[:, t:], bwd[:, t:], rtol=0, atol=0)
    assert not torch.allclose(bwd_l[:, :t], bwd[:, :t])  # ... and it does reach the earlier ones


def test_the_feature_layers_are_token_then_each_lstm_layer_both_directions():
    model = build().eval()
    x = ids(2, 6)
    mask = torch.ones_like(x, dtype=torch.bool)
    layers = model.encoder.hidden_layers(model.word_bytes[x], mask)
    size = tiny().projection_dim
    assert len(layers) == 3 and all(layer.shape == (2, 6, 2 * size) for layer in layers)
    torch.testing.assert_close(layers[0][..., :size], layers[0][..., size:], rtol=0, atol=0)  # [x; x]
    out = model.encoder(x, mask, features=TokenFeatures(word_bytes=model.word_bytes[x])).tokens
    torch.testing.assert_close(out, layers[-1], rtol=0, atol=0)  # eval: no dropout on the top layer


def test_a_padded_batch_gives_what_each_sentence_gives_alone():
    model = build().eval()
    short, long = ids(1, 4, seed=3), ids(1, 7, seed=4)
    batch = torch.zeros(2, 7, dtype=torch.long)
    batch[0, :4], batch[1] = short[0], long[0]
    mask = batch != 0
    with torch.no_grad():
        together = model.encoder.hidden_layers(model.word_bytes[batch], mask)
        alone = [model.encoder.hidden_layers(model.word_bytes[s], torch.ones_like(s, dtype=torch.bool))
                 for s in (short, long)]
    for layer in range(3):
        torch.testing.assert_close(together[layer][0, :4], alone[0][layer][0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(together[layer][1], alone[1][layer][0], rtol=1e-5, atol=1e-6)


def test_loss_is_the_mean_of_the_directions_finite_and_every_parameter_gets_a_gradient():
    model = build().train()
    x, y = ids(3, 7), ids(3, 7, seed=1)
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[2, 5:] = False
    out = model(x, None, mask, y)
    assert torch.isfinite(out.loss) and set(out.losses) == {"forward", "backward"}
    torch.testing.assert_close(out.loss, (out.losses["forward"] + out.losses["backward"]) / 2)
    out.loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_save_load_round_trip_and_eval_determinism(tmp_path):
    model, other = build(seed=0).eval(), build(seed=1).eval()
    assert_save_load_round_trip(model, other, ids(2, 9), tmp_path)
    assert_eval_deterministic_and_train_uses_dropout(model, ids(2, 9))


def test_evaluation_reports_each_directions_perplexity(tmp_path):
    lines = [" ".join(WORDS[3 + (i * 7 + j * 3) % (VOCAB - 3)] for j in range(3 + i % 5)) for i in range(60)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(lines[:20:3]) + "\n", encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": "whitespace", "bptt": 6},
        "model": {"name": "elmo", "preset": "tiny"}, "train": {"batch_size": 2, "progress": False}}, "test")
    assert {"forward_perplexity", "backward_perplexity"} <= set(LanguageModelingTask.metrics_for(config))
    task = LanguageModelingTask.from_data(config)
    torch.manual_seed(0)
    model = task.build_model()
    results = task.evaluate(model, "dev")
    forward, backward = results["forward_perplexity"], results["backward_perplexity"]
    assert forward != backward and all(math.isfinite(v) and v > 1 for v in (forward, backward))
    torch.testing.assert_close(results["loss"], (results["forward_loss"] + results["backward_loss"]) / 2)
    assert results["perplexity"] == pytest.approx(math.sqrt(forward * backward))
