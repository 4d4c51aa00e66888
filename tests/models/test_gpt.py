"""Model harness for GPT (models/gpt.py) on the "tiny" preset, built as the language-modelling task
builds it: the GPT encoder with a bias-free LMHead.

Shapes, finite loss, a gradient for every parameter, a safetensors round trip, eval determinism,
causality, the explicit attention path == the fused one, `step` with its key/value cache == the
full forward, cached generation == generation by full recomputation (greedy and seeded sampling,
past the context limit), GPT-2's initialisation (the head's included), config checks (data.bptt
beyond the context fails when the config is read) and the preset sizes.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, decode
from textnn.models.gpt import GPT, PRESETS, GPTConfig
from textnn.models.rnn_lm import PRESETS as RNN_PRESETS
from textnn.registry import model_entry
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import AttentionLanguageModel, LanguageModelingTask, language_model
from tests.models.lm_checks import (FullRecomputation, assert_eval_deterministic_and_train_uses_dropout,
                                    assert_save_load_round_trip, build_lm)

VOCAB, PAD = 23, 0
VARIANTS = [pytest.param({}, id="tiny"), pytest.param({"tie": False}, id="untied"),
            pytest.param({"bias": False, "d_ff": 24}, id="nobias-dff"),
            pytest.param({"n_layers": 1, "n_heads": 4}, id="1layer-4heads")]


def build(overrides: dict | None = None, seed: int = 0) -> AttentionLanguageModel:
    return build_lm("gpt", overrides, VOCAB, seed=seed, pad_id=PAD)


def sharpened(model: AttentionLanguageModel, std: float = 0.4) -> AttentionLanguageModel:
    """The model with every parameter redrawn from N(0, std^2): at GPT's init scale a random model's
    next-token distribution is nearly uniform and its positions barely matter, so a wrong position or
    a missing token would rarely change a draw; with these weights it does."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("overrides", VARIANTS)
def test_shapes_finite_loss_and_every_parameter_gets_a_gradient(overrides):
    model = build(overrides)
    x = ids(3, 9)
    out = model(x, state=("ignored",))
    assert out.logits.shape == (3, 9, VOCAB) and out.state is None
    loss = F.cross_entropy(out.logits.reshape(-1, VOCAB), ids(3, 9, seed=1).reshape(-1))  # [B*T, V]
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_tied_weights_share_one_matrix():
    tied, untied = build(), build({"tie": False})
    assert tied.head.decoder.weight is tied.encoder.token_embedding.weight
    assert tied.head.decoder.bias is None and untied.head.decoder.bias is None  # GPT-2's output layer has none
    extra = sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters())
    assert extra == VOCAB * tied.encoder.cfg.d_model


@pytest.mark.parametrize("overrides", VARIANTS)
def test_save_load_round_trip(tmp_path, overrides):
    model, other = build(overrides, seed=0).eval(), build(overrides, seed=1).eval()
    x = ids(2, 9)
    assert_save_load_round_trip(model, other, x, tmp_path)
    if model.encoder.cfg.tie:
        assert other.head.decoder.weight is other.encoder.token_embedding.weight


def test_eval_is_deterministic_and_train_mode_uses_dropout():
    model = build({"dropout": 0.3})
    x = ids(2, 9)
    assert_eval_deterministic_and_train_uses_dropout(model, x)


def test_changing_a_future_token_never_changes_earlier_logits():
    model = build().eval()
    x = ids(2, 12)
    base = model(x).logits
    for t in range(12):
        changed = x.clone()
        changed[:, t] = (changed[:, t] % (VOCAB - 1)) + 1  # another real token
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, :t], base[:, :t], rtol=0, atol=0)
        assert not torch.allclose(logits[:, t:], base[:, t:])  # ... and it does change the later ones


def test_explicit_attention_path_equals_the_fused_forward():
    model = build().eval()
    x = ids(2, 11)
    out, attention = model.forward_with_attention(x)
    torch.testing.assert_close(out.logits, model(x).logits, rtol=1e-5, atol=1e-6)
    cfg = model.encoder.cfg
    assert attention.shape == (cfg.n_layers, 2, cfg.n_heads, 11, 11)
    torch.testing.assert_close(attention.sum(-1), torch.ones(attention.shape[:-1]))
    assert attention.triu(1).abs().max() == 0


def test_step_with_the_cache_equals_the_forwards_logits():
    """A prompt, then single tokens and a multi-token chunk: each step's logits == the full forward's."""
    model = build().eval()
    x = ids(2, 14)
    full = model(x).logits  # [B, T, V]
    with torch.no_grad():
        logits, cache = model.step(x[:, :5])
        torch.testing.assert_close(logits, full[:, 4], rtol=1e-5, atol=1e-6)
        for t in range(5, 9):
            logits, cache = model.step(x[:, t:t + 1], cache)
            assert cache.offset == t + 1
            torch.testing.assert_close(logits, full[:, t], rtol=1e-5, atol=1e-6)
        logits, cache = model.step(x[:, 9:14], cache)  # T' > 1 after a cache: the causal mask is offset
        torch.testing.assert_close(logits, full[:, 13], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decoding", [{"method": "greedy"}, {"method": "sample", "seed": 3},
                                      {"method": "sample", "temperature": 0.9, "top_k": 5, "top_p": 0.9, "seed": 11},
                                      {"method": "beam", "beam_size": 3, "n_best": 2}],
                         ids=["greedy", "sampling", "top-k-top-p", "beam"])
def test_cached_generation_equals_full_recomputation_past_the_context(decoding):
    model = sharpened(build()).eval()
    context = model.encoder.cfg.context
    prompt = ids(3, 5, seed=2)
    cfg = DecodingConfig(max_tokens=3 * context, **decoding)  # well past the learned positions: the cache is rebuilt
    cached = [[h.tokens for h in row] for row in decode(model, None, prompt, cfg)]
    reference = [[h.tokens for h in row] for row in decode(FullRecomputation(model, context), None, prompt, cfg)]
    assert all(len(tokens) == 3 * context for row in cached for tokens in row)
    assert cached == reference
    if decoding["method"] == "sample":  # the seed matters: another one gives other text
        other = decode(model, None, prompt, dataclasses.replace(cfg, seed=cfg.seed + 1))
        assert [[h.tokens for h in row] for row in other] != cached


def test_step_past_the_context_keeps_the_last_window():
    model = build().eval()
    context = model.encoder.cfg.context
    x = ids(1, context + 7)
    with torch.no_grad():
        logits, cache = model.step(x)  # a prompt longer than the context is cropped to its last window
        expected = model(x[:, -context:]).logits[:, -1]
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
        assert cache.offset == context and torch.equal(cache.tokens, x[:, -context:])


def test_a_window_longer_than_the_context_names_data_bptt():
    model = build()
    with pytest.raises(TextnnError, match=r"data\.bptt.*<= 16"):
        model(ids(1, 17))


def test_a_config_with_bptt_beyond_the_context_fails_when_it_is_read():
    """Checked by the language-modelling task in config_from_dict, before any run directory exists."""
    def config(bptt: int, **model):
        return config_from_dict({"task": "language_modeling", "data": {"format": "text", "bptt": bptt},
                                 "model": {"name": "gpt", "preset": "tiny", **model}}, "test")

    with pytest.raises(TextnnError, match=r"data\.bptt: got 17.*model\.context"):
        config(17)  # tiny: context 16
    assert config(16).data.bptt == 16
    assert config(40, context=40).model.context == 40
    with pytest.raises(TextnnError, match=r"data\.bptt: got 128"):  # the default bptt
        config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                          "model": {"name": "gpt", "preset": "nanogpt_cpu"}}, "test")  # context 64


def test_initialisation_scales_the_residual_projections():
    torch.manual_seed(0)
    cfg = GPTConfig(n_layers=8, n_heads=4, d_model=256, context=32, tie=False)
    model = language_model("gpt", cfg, 500)
    encoder = model.encoder
    residual = 0.02 / math.sqrt(2 * cfg.n_layers)
    for block in encoder.blocks:
        assert block.attn.out_proj.weight.std().item() == pytest.approx(residual, rel=0.05)
        assert block.ff.proj.weight.std().item() == pytest.approx(residual, rel=0.05)
        assert block.attn.in_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert block.attn.in_proj.bias.abs().max() == 0
    assert encoder.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert encoder.position_embedding.weight.std().item() == pytest.approx(0.02, rel=0.05)
    # The untied output layer too (nn.Linear's own init would give std 1/sqrt(3 * 256) = 0.036).
    assert model.head.decoder.weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("field,value", [("n_layers", 0), ("n_heads", 0), ("d_model", 15), ("d_ff", -1),
                                         ("context", 0), ("dropout", 1.0), ("dropout", -0.1)])
def test_bad_config_values_name_the_field(field, value):
    with pytest.raises(TextnnError, match=f"model.{field}"):
        PRESETS["tiny"].options(**{field: value})


def test_presets_resolve_through_the_registry():
    config_cls, model_cls, presets = model_entry("gpt")
    assert (config_cls, model_cls) == (GPTConfig, GPT) and LanguageModelingTask.unusable_reason(GPT) is None
    assert {"tiny", "paper", "nanogpt_cpu", "small", "gpt2"} <= set(presets)
    for name in presets:
        presets[name].options()
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text", "bptt": 64},
                               "model": {"name": "gpt", "preset": "nanogpt_cpu", "dropout": 0.1}}, "test")
    assert (config.model.n_layers, config.model.n_heads, config.model.d_model, config.model.context,
            config.model.dropout) == (4, 4, 128, 64, 0.1)


def test_gpt2_preset_has_gpt2_small_size():
    """12 x 768 with a 50,257-token vocabulary and 1,024 positions: GPT-2 small's 124M parameters."""
    with torch.device("meta"):
        model = language_model("gpt", PRESETS["gpt2"].options(), 50257)
    assert model.num_parameters() == pytest.approx(124.4e6, rel=0.002)


def test_small_preset_matches_a_two_layer_200_unit_tied_lstm_on_wikitext2():
    vocab = 33279  # WikiText-2's 33,278 tokens with <eos>, plus <pad>
    with torch.device("meta"):
        gpt = language_model("gpt", PRESETS["small"].options(), vocab)
        lstm = language_model("rnn_lm", RNN_PRESETS["gluon_2x200"].options(), vocab)
    ours, theirs = gpt.num_parameters(), lstm.num_parameters()
    assert abs(ours - theirs) / theirs < 0.01
