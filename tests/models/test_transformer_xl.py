"""Transformer-XL (models/transformer_xl.py, modules/relative_attention.py) on the "tiny" preset, built
as the language-modelling task builds it: the TransformerXL encoder with an LMHead.

The model harness (shapes, finite loss, a gradient for every parameter, safetensors round trip,
eval determinism), then what makes it Transformer-XL: a segment read with the memory of the
previous one equals one pass over both; no position sees the future; the relative shift and the
whole attention equal naive loops over (query, key) pairs; memory lengths follow mem_len /
eval_mem_len; `same_length` gives every position exactly eval_mem_len keys; cached `step`
decoding equals the full forward; config checks; the real CLI trains and evaluates it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, greedy
from textnn.models.rnn_lm import RNNLMConfig
from textnn.models.transformer_xl import PRESETS, TransformerXL, TransformerXLConfig
from textnn.modules.positions import sinusoid_encoding
from textnn.resolve import config_from_dict
from textnn.modules.relative_attention import (RelativeMultiHeadAttention, rel_shift, relative_causal_mask,
                                               relative_distances)
from textnn.registry import model_entry
from textnn.tasks.language_modeling import LanguageModel, LanguageModelingTask, language_model
from tests.models.lm_checks import (assert_eval_deterministic_and_train_uses_dropout,
                                    assert_save_load_round_trip, build_lm)

VOCAB, PAD = 23, 0
VARIANTS = [pytest.param({}, id="post-ln"), pytest.param({"pre_ln": True}, id="pre-ln"),
            pytest.param({"tie_weights": False, "clamp_len": 5}, id="untied-clamped")]
TOL = dict(rtol=1e-5, atol=1e-5)


def build(overrides: dict | None = None, seed: int = 0) -> LanguageModel:
    return build_lm("transformer_xl", overrides, VOCAB, seed=seed, pad_id=PAD)


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# --- harness ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", VARIANTS)
def test_shapes_finite_loss_and_every_parameter_gets_a_gradient(overrides):
    model = build(overrides).train()
    first = model(ids(3, 7))
    assert first.logits.shape == (3, 7, VOCAB)
    assert len(first.state) == model.encoder.cfg.n_layers
    assert all(m.shape == (3, 7, model.encoder.cfg.d_model) and not m.requires_grad for m in first.state)
    out = model(ids(3, 5, seed=1), first.state)  # the second segment reads the first one's memory
    loss = F.cross_entropy(out.logits.reshape(-1, VOCAB), ids(3, 5, seed=2).reshape(-1))  # [B*T, V]
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_tied_weights_share_one_matrix():
    tied, untied = build(), build({"tie_weights": False})
    assert tied.head.decoder.weight is tied.encoder.embedding.weight
    assert tied.num_parameters() + VOCAB * tied.encoder.cfg.d_model == untied.num_parameters()


def test_every_weight_starts_from_the_authors_normal_init_the_heads_included():
    """N(0, 0.02) for the embedding, every layer's matrices, u and v, and an untied output layer (whose
    nn.Linear init would have std 1/sqrt(3 * 16) = 0.14); zero biases."""
    torch.manual_seed(0)
    model = language_model("transformer_xl", PRESETS["tiny"].options(tie_weights=False), 2000)
    encoder, head = model.encoder, model.head.decoder
    for weight in (head.weight, encoder.embedding.weight[1:], encoder.layers[0].feed_forward.fc.weight,
                   torch.cat([encoder.biases.content, encoder.biases.position])):
        assert weight.std().item() == pytest.approx(0.02, rel=0.25)
    assert head.weight.std().item() == pytest.approx(0.02, rel=0.05)  # 32,000 draws
    assert head.bias.abs().max() == 0 and encoder.layers[0].feed_forward.fc.bias.abs().max() == 0


@pytest.mark.parametrize("overrides", VARIANTS)
def test_save_load_round_trip(tmp_path, overrides):
    model, other = build(overrides, seed=0).eval(), build(overrides, seed=1).eval()
    x = ids(2, 9)
    assert_save_load_round_trip(model, other, x, tmp_path)
    if model.encoder.cfg.tie_weights:
        assert other.head.decoder.weight is other.encoder.embedding.weight


def test_feed_forward_weights_keep_their_saved_names():
    """The layers use the shared FeedForward (fc, proj), but runs on disk name its weights as the
    nn.Sequential it replaced did (feed_forward.net.0 / net.3): state_dict() writes those names, in the
    order of the parameters, and load_state_dict() reads them."""
    model, other = build(seed=0).eval(), build(seed=1).eval()
    state = model.state_dict()
    layer = [name[len("encoder.layers.0."):] for name in state if name.startswith("encoder.layers.0.")]
    assert [n for n in layer if n.startswith("feed_forward.")] == [
        "feed_forward.net.0.weight", "feed_forward.net.0.bias", "feed_forward.net.3.weight", "feed_forward.net.3.bias"]
    parameter_order = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    assert [n.replace(".net.0.", ".fc.").replace(".net.3.", ".proj.") for n in state] == parameter_order
    other.load_state_dict(state)  # strict: every saved name finds its parameter
    x = ids(2, 9)
    torch.testing.assert_close(other(x).logits, model(x).logits, rtol=0, atol=0)


def test_eval_is_deterministic_and_train_mode_uses_dropout():
    model = build({"dropout": 0.3, "dropatt": 0.3})
    x = ids(2, 9)
    state = model.eval()(x).state
    assert_eval_deterministic_and_train_uses_dropout(model, x, state)


# --- recurrence: memory == one pass over the concatenation ---------------------------------------

@pytest.mark.parametrize("overrides", VARIANTS)
def test_segment_with_memory_equals_one_pass_over_both_segments(overrides):
    """Dai et al. §3.2: layer n's memory is layer n's input over the previous segment, so when it
    covers all of that segment the next one sees exactly what a single causal pass would show it."""
    model = build(overrides).eval()  # eval_mem_len 16 covers every earlier segment below
    x = ids(2, 14)
    whole = model(x).logits  # [B, 14, V]
    first = model(x[:, :6])
    second = model(x[:, 6:10], first.state)
    third = model(x[:, 10:], second.state)  # memory of 10 positions, two segments deep
    torch.testing.assert_close(first.logits, whole[:, :6], **TOL)
    torch.testing.assert_close(second.logits, whole[:, 6:10], **TOL)
    torch.testing.assert_close(third.logits, whole[:, 10:], **TOL)
    # ... and the memory it hands on is the same as the one pass's (the newest 14 <= 16 positions).
    for carried, direct in zip(third.state, model(x).state):
        torch.testing.assert_close(carried, direct, **TOL)


def test_memory_shorter_than_the_past_forgets_it():
    """The control for the test above: once the past is longer than the memory, results differ."""
    model = build({"eval_mem_len": 3}).eval()
    x = ids(2, 12)
    first = model(x[:, :6])
    assert first.state[0].size(1) == 3
    second = model(x[:, 6:], first.state)
    assert not torch.allclose(second.logits, model(x).logits[:, 6:], atol=1e-4)


def test_no_position_sees_the_future():
    model = build().eval()
    x = ids(2, 12)
    memory = model(ids(2, 5, seed=3)).state
    base = model(x, memory).logits
    changed = x.clone()
    changed[:, 7:] = (changed[:, 7:] % (VOCAB - 1)) + 1  # different real tokens from position 7 on
    out = model(changed, memory).logits
    torch.testing.assert_close(out[:, :7], base[:, :7], rtol=0, atol=0)
    assert not torch.allclose(out[:, 7:], base[:, 7:])


# --- relative attention against naive loops --------------------------------------------------------

def test_rel_shift_moves_every_row_to_key_order():
    torch.manual_seed(0)
    q_len, mem_len = 5, 4
    key_len = q_len + mem_len
    by_distance = torch.randn(2, 3, q_len, key_len)  # [B, H, T, K], column c = distance K-1-c
    shifted = rel_shift(by_distance)
    for i in range(q_len):
        for j in range(mem_len + i + 1):  # every key query i may see
            distance = mem_len + i - j
            assert torch.equal(shifted[:, :, i, j], by_distance[:, :, i, key_len - 1 - distance]), (i, j)


def test_position_terms_equal_a_naive_loop():
    """Terms b + d of §3.3, (q_i + v)·W_R R_{i-j}, for every visible (i, j), computed one pair at a time."""
    torch.manual_seed(0)
    d_model, heads, d_head, q_len, mem_len = 8, 2, 3, 4, 3
    key_len = mem_len + q_len
    attention = RelativeMultiHeadAttention(d_model, heads, d_head, dropatt=0.0)
    x = torch.randn(1, q_len, d_model)
    v = torch.randn(heads, d_head)
    pos = sinusoid_encoding(relative_distances(key_len), d_model)  # [K, D], row c = distance K-1-c
    q = attention.query(x).view(q_len, heads, d_head)  # [1, T, H*Dh] -> [T, H, Dh]
    r = attention.position(pos).view(key_len, heads, d_head)  # [K, H, Dh]
    vectorised = rel_shift(torch.matmul((q + v).transpose(0, 1), r.permute(1, 2, 0)))  # [H, T, K]
    for i in range(q_len):
        for j in range(mem_len + i + 1):
            r_ij = attention.position(sinusoid_encoding(torch.tensor([float(mem_len + i - j)]), d_model))
            naive = ((q[i] + v) * r_ij.view(heads, d_head)).sum(-1)  # [H]
            torch.testing.assert_close(vectorised[:, i, j], naive, **TOL)


def naive_attention(attention: RelativeMultiHeadAttention, x, memory, pos, u, v, allowed) -> torch.Tensor:
    """Dai et al. §3.3 written out: every score a + b + c + d by its own dot products, one query at a time."""
    heads, d_head = attention.n_heads, attention.d_head
    context = torch.cat([memory, x], dim=1)[0]  # [K, D]
    key_len, q_len = context.size(0), x.size(1)
    mem_len = key_len - q_len
    q = attention.query(x[0]).view(q_len, heads, d_head)
    k, val = attention.key_value(context).view(key_len, 2, heads, d_head).unbind(1)  # [K, H, Dh] each
    r = attention.position(pos).view(key_len, heads, d_head)  # row c = distance K-1-c
    rows = []
    for i in range(q_len):
        scores = torch.full((heads, key_len), float("-inf"))
        for j in range(key_len):
            if allowed[i, j]:
                r_ij = r[key_len - 1 - (mem_len + i - j)]
                a, b = (q[i] * k[j]).sum(-1), (q[i] * r_ij).sum(-1)
                c, d = (u * k[j]).sum(-1), (v * r_ij).sum(-1)
                scores[:, j] = (a + b + c + d) / math.sqrt(d_head)
        weights = scores.softmax(-1)  # [H, K]
        rows.append(torch.einsum("hk,khd->hd", weights, val).reshape(heads * d_head))
    return attention.out(torch.stack(rows))[None]  # [1, T, D]


@pytest.mark.parametrize("span", [0, 4])
def test_attention_equals_naive_scores_with_memory_and_mask(span):
    torch.manual_seed(1)
    d_model, heads, d_head, q_len, mem_len = 8, 2, 3, 5, 4
    attention = RelativeMultiHeadAttention(d_model, heads, d_head, dropatt=0.0).eval()
    x, memory = torch.randn(1, q_len, d_model), torch.randn(1, mem_len, d_model)
    u, v = torch.randn(heads, d_head), torch.randn(heads, d_head)
    pos = sinusoid_encoding(relative_distances(mem_len + q_len, clamp_len=6), d_model)
    allowed = relative_causal_mask(q_len, mem_len, span)
    torch.testing.assert_close(attention(x, memory, pos, u, v, allowed),
                               naive_attention(attention, x, memory, pos, u, v, allowed), **TOL)


def test_causal_mask_and_same_length_span():
    allowed = relative_causal_mask(q_len=3, mem_len=2)
    assert allowed.tolist() == [[True, True, True, False, False],
                                [True, True, True, True, False],
                                [True, True, True, True, True]]
    windowed = relative_causal_mask(q_len=3, mem_len=2, span=3)
    assert windowed.tolist() == [[True, True, True, False, False],
                                 [False, True, True, True, False],
                                 [False, False, True, True, True]]
    assert relative_distances(5, clamp_len=2).tolist() == [2.0, 2.0, 2.0, 1.0, 0.0]


# --- memory lengths and same_length ----------------------------------------------------------------

def test_memory_length_follows_mem_len_in_training_and_eval_mem_len_in_eval():
    model = build({"mem_len": 4, "eval_mem_len": 10})
    x = ids(2, 3)
    model.train()
    state = None
    for expected in (3, 4, 4):
        state = model(x, state).state
        assert [m.size(1) for m in state] == [expected] * model.encoder.cfg.n_layers
    model.eval()
    for expected in (7, 10, 10, 10):
        state = model(x, state).state
        assert [m.size(1) for m in state] == [expected] * model.encoder.cfg.n_layers
    # Layer 0's memory is the embedding output at the newest 10 positions, all read in eval mode.
    stream = torch.cat([x] * 4, dim=1)[:, -10:]
    torch.testing.assert_close(state[0], model.encoder.embedding(stream) * model.encoder.cfg.d_model ** 0.5)
    # A memory longer than the current mode's M is cut to its newest M positions first.
    model.train()
    torch.manual_seed(5)
    long_memory = model(x, state).logits
    torch.manual_seed(5)
    cut_memory = model(x, [m[:, -4:] for m in state]).logits
    torch.testing.assert_close(long_memory, cut_memory, rtol=0, atol=0)


def test_no_memory_when_mem_len_is_zero():
    model = build({"mem_len": 0, "eval_mem_len": 0}).eval()
    out = model(ids(2, 6))
    assert out.state is None
    torch.testing.assert_close(model(ids(2, 4, seed=1), out.state).logits, model(ids(2, 4, seed=1)).logits)


def test_same_length_gives_every_position_exactly_eval_mem_len_keys():
    """With one layer, a same_length position's output depends on exactly the last S tokens: it equals
    the last position of a memory-less pass over that window of S tokens, wherever it sits in its segment."""
    span = 5
    model = build({"n_layers": 1, "eval_mem_len": span, "same_length": True}).eval()
    stream = ids(1, 20)
    state, logits = None, []
    for start in range(0, 20, 4):
        out = model(stream[:, start:start + 4], state)
        state = out.state
        logits.append(out.logits)
    logits = torch.cat(logits, dim=1)  # [1, 20, V]
    for t in range(20):
        window = stream[:, max(0, t - span + 1):t + 1]
        torch.testing.assert_close(logits[:, t], model(window).logits[:, -1], **TOL)
    # Without same_length the early positions of a segment see fewer keys: a different result.
    plain = build({"n_layers": 1, "eval_mem_len": span}).eval()
    first = plain(stream[:, :8])
    second = plain(stream[:, 8:12], first.state).logits
    assert not torch.allclose(second[:, 3], plain(stream[:, 7:12]).logits[:, -1], atol=1e-4)


# --- generation ------------------------------------------------------------------------------------

def test_step_decoding_equals_full_forward():
    """`step` feeds one token at a time through the memory cache; the eval memory (16) holds all 12."""
    model = build().eval()
    x = ids(2, 12)
    full = model(x).logits  # [B, T, V]
    logits, state = model.step(x[:, :4], None)
    torch.testing.assert_close(logits, full[:, 3], **TOL)
    for t in range(4, 12):
        logits, state = model.step(x[:, t:t + 1], state)
        torch.testing.assert_close(logits, full[:, t], **TOL)


def test_greedy_sampling_through_step_matches_argmax_of_full_passes():
    model = build().eval()
    prompt = ids(1, 3)[0]
    [[generated]] = greedy(model, None, prompt[None], DecodingConfig(max_tokens=6))
    expected = prompt.clone()
    for _ in range(6):
        next_id = model(expected[None]).logits[0, -1].argmax()
        expected = torch.cat([expected, next_id[None]])
    assert generated.tokens == expected[3:].tolist()


def test_a_state_that_is_not_this_models_memory_is_refused():
    model = build().eval()
    state = model(ids(2, 4)).state
    with pytest.raises(TextnnError, match="list of 2 tensors"):
        model(ids(2, 4), state[:1])
    with pytest.raises(TextnnError, match="batch of 3"):
        model(ids(3, 4), state)
    with pytest.raises(TextnnError, match="transformer_xl state"):
        model(ids(2, 4), (torch.zeros(2, 2, 16), torch.zeros(2, 2, 16)[0]))


# --- config, presets, registry ---------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("n_layers", 0), ("n_heads", 0), ("d_model", 15), ("d_head", 0),
                                         ("d_ff", -1), ("mem_len", -1), ("eval_mem_len", -2),
                                         ("clamp_len", -1), ("dropout", 1.0), ("dropatt", -0.1),
                                         ("n_layers", True)])
def test_bad_config_values_name_the_field(field, value):
    with pytest.raises(TextnnError, match=f"model.{field}"):
        PRESETS["tiny"].options(**{field: value})


def test_same_length_needs_a_memory():
    with pytest.raises(TextnnError, match="model.same_length"):
        PRESETS["tiny"].options(mem_len=0, eval_mem_len=0, same_length=True)
    assert PRESETS["tiny"].options(mem_len=0, same_length=True).eval_memory == 16


def test_presets_resolve_through_the_registry():
    config_cls, model_cls, presets = model_entry("transformer_xl")
    assert (config_cls, model_cls) == (TransformerXLConfig, TransformerXL)
    assert LanguageModelingTask.unusable_reason(TransformerXL) is None
    assert {"tiny", "small", "paper", "paper_wt103_base"} <= set(presets)
    for name in presets:
        presets[name].options()
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                               "model": {"name": "transformer_xl", "preset": "paper_wt103_base", "mem_len": 64}},
                              "test")
    cfg = config.model
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.mem_len) == (16, 410, 10, 41, 2100, 64)


def test_small_preset_matches_the_two_layer_200_unit_tied_lstm_in_size():
    vocab = 33279  # WikiText-2 train, whitespace tokens + <pad>, <unk>, <eos>
    xl = language_model("transformer_xl", PRESETS["small"].options(), vocab)
    lstm = language_model("rnn_lm", RNNLMConfig(embedding_dim=200, hidden_size=200, num_layers=2, tie_weights=True),
                          vocab)
    assert abs(xl.num_parameters() - lstm.num_parameters()) / lstm.num_parameters() < 1e-3


# --- the real CLI ----------------------------------------------------------------------------------

def test_cli_trains_and_evaluates_transformer_xl(tmp_path):
    words = "the cat sat on a mat and then it ran far away from home".split()
    rng = torch.Generator().manual_seed(0)
    lines = [" ".join(words[int(i)] for i in torch.randint(len(words), (12,), generator=rng)) for _ in range(60)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:50]) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(lines[50:]) + "\n", encoding="utf-8")
    (tmp_path / "xl.yaml").write_text(
        "task: language_modeling\n"
        f"data: {{format: text, train: {tmp_path / 'train.txt'}, dev: {tmp_path / 'dev.txt'}, "
        "tokenizer: whitespace, bptt: 8}\n"
        "model: {name: transformer_xl, preset: tiny}\n"
        "train: {optimizer: adam, lr: 0.01, max_steps: 60, epochs: 3, batch_size: 4, eval_every: 30, "
        "threads: 1, progress: false}\n", encoding="utf-8")
    env = {**os.environ, "TEXTNN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    run = tmp_path / "run"
    train = subprocess.run([sys.executable, "-m", "textnn", "train", str(tmp_path / "xl.yaml"), "--run-dir", str(run)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert train.returncode == 0, train.stderr
    status = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished"
    evaluate = subprocess.run([sys.executable, "-m", "textnn", "evaluate", str(run), "--data",
                               str(tmp_path / "dev.txt"), "--json"], capture_output=True, text=True, env=env,
                              timeout=300)
    assert evaluate.returncode == 0, evaluate.stderr
    metrics = json.loads(evaluate.stdout)
    # 10 dev lines of 12 words + <eos> = 130 tokens; every one but the first is predicted once.
    assert metrics["tokens"] == 129
    # It learned something: below the loss of a uniform guess over its vocabulary (the tokens are
    # uniform random words, but <eos> and the unused specials are learnable).
    vocab_size = len(json.loads((run / "vocab.json").read_text(encoding="utf-8"))["tokens"])
    assert math.isfinite(metrics["loss"]) and metrics["loss"] < math.log(vocab_size) - 0.05
