"""Shared harness for every text classifier, on its "tiny" preset, built through the registry as the
classification task builds it: the family's encoder with a single-sentence or a pair head.

Each classifier family (an LM encoder whose per-token states are pooled, and ULMFiT's AWD-LSTM
classifier with concat pooling, batch-normed blocks and BPT3C windows) is checked for: output
shapes, a finite loss, a non-zero gradient on every trainable parameter (frozen ones get none and stay
put), a safetensors save/load round trip, eval determinism (and train-mode randomness where the model
has dropout), padding invariance for single and pair inputs, pretrained initialisation, and its
family's own trick (Kim's max-norm, the LSTM forget-gate bias, DAN's word dropout). Invalid config
values must raise TextnnError.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from textnn.errors import TextnnError
from textnn.models.base import InputSpec
from textnn.modules.conv import MultiWidthConv
from textnn.modules.masking import word_dropout_mask
from textnn.modules.pooling import last_valid, masked_max, masked_mean, masked_sum, pair_features
from textnn.modules.rnn import RNNEncoder
from textnn.registry import model_entry
from textnn.tasks.classification import Classifier, ClassificationHeadConfig, classifier_head

CLASSIFIERS = ("bow", "cbow", "deep_cbow", "dan", "cnn", "rnn")

VOCAB, CLASSES, PAD = 40, 3, 1  # a pad id other than 0 catches code that assumes 0

# (model name, overrides of the tiny preset, id): every classifier, every CNN mode and every RNN
# cell x direction x pooling.
VARIANTS: list[tuple[str, dict, str]] = []
for _name in CLASSIFIERS:
    if _name == "cnn":
        for _mode in ("rand", "static", "non-static", "multichannel"):
            VARIANTS.append((_name, {"mode": _mode}, f"cnn-{_mode}"))
    elif _name == "rnn":
        for _cell in ("rnn", "lstm", "gru"):
            for _bi in (False, True):
                for _pool in ("last", "max", "mean"):
                    VARIANTS.append((_name, {"cell": _cell, "bidirectional": _bi, "pooling": _pool},
                                     f"rnn-{_cell}-{'bi' if _bi else 'uni'}-{_pool}"))
    else:
        VARIANTS.append((_name, {}, _name))
VARIANTS.append(("rnn", {"head": {"hidden": 6}, "num_layers": 1, "dropout": 0.0}, "rnn-mlp-1layer"))
VARIANTS.append(("dan", {"num_layers": 0}, "dan-nbow"))
# A language model's encoder gives per-token states only: the head pools them (head.pooling).
VARIANTS.append(("rnn_lm", {"head": {"pooling": "last"}}, "rnn_lm-last"))
VARIANTS.append(("gpt", {"head": {"pooling": "mean"}}, "gpt-mean"))
# ULMFiT (Howard & Ruder 2018 §3.3): AWD-LSTM states, concat pooling, two batch-normed linear blocks,
# and inputs read in windows of 3 tokens with the state carried (BPT3C).
VARIANTS.append(("awd_lstm", {"head": {"pooling": "concat", "hidden": 6, "activation": "relu", "batch_norm": True,
                                       "dropout": 0.2, "hidden_dropout": 0.1, "bptt": 3}}, "awd_lstm-ulmfit"))

variant = pytest.mark.parametrize("name,overrides", [pytest.param(n, o, id=i) for n, o, i in VARIANTS])

HAS_DROPOUT = {"dan", "cnn", "rnn", "gpt", "awd_lstm"}
NO_VECTORS = {"bow", "rnn_lm", "gpt", "awd_lstm"}


def build(name: str, overrides: dict | None = None, pretrained: torch.Tensor | None = None, seed: int = 0,
          pair: bool = False):
    """(encoder config, Classifier) with the tiny preset; `overrides` may hold a "head" dict."""
    config_cls, encoder_cls, presets = model_entry(name)
    values = dict(overrides or {})
    head_cfg = ClassificationHeadConfig(**{**presets["tiny"].head.given(), **values.pop("head", {})})
    cfg = presets["tiny"].options(**values)
    torch.manual_seed(seed)
    encoder = encoder_cls(cfg, InputSpec(vocab_size=VOCAB, pad_id=PAD, pretrained=pretrained))
    head = classifier_head(encoder, CLASSES, head_cfg, pair=pair)
    return cfg, Classifier(encoder, head, head_cfg.pooling, bptt=head_cfg.bptt)


def batch(lengths: list[int], total: int | None = None, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (pad = PAD, real ids never PAD) and mask for the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    total = total or max(lengths)
    ids = torch.full((len(lengths), total), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), total), dtype=torch.bool)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(PAD + 1, VOCAB, (n,), generator=gen)
        mask[row, :n] = True
    return ids, mask


def vectors(dim: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(VOCAB, dim, generator=torch.Generator().manual_seed(seed))


def embedding_params(model: nn.Module) -> dict[str, torch.Tensor]:
    """The word-embedding tables of a classifier's encoder."""
    return {n: p for n, p in model.named_parameters() if n.endswith("embedding.weight")}


# ---------------------------------------------------------------------------------------- harness


@variant
def test_shapes_and_finite_loss(name, overrides):
    _, model = build(name, overrides)
    _, pair_model = build(name, overrides, pair=True)
    ids, mask = batch([5, 2, 7])
    pair_ids, pair_mask = batch([3, 6, 1], seed=1)
    single = model(ids, mask)
    pair = pair_model(ids, mask, pair_ids, pair_mask)
    assert single.logits.shape == (3, CLASSES) and pair.logits.shape == (3, CLASSES)
    loss = F.cross_entropy(single.logits, torch.tensor([0, 1, 2]))
    assert torch.isfinite(loss) and torch.isfinite(pair.logits).all()


@variant
@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_every_trainable_parameter_gets_a_gradient(name, overrides, pair):
    """No parameter is left unused (a head the run does not use does not exist), which DDP needs."""
    _, model = build(name, overrides, pair=pair)
    model.train()
    torch.manual_seed(1)
    ids, mask = batch([5, 2, 7, 4], total=8)
    pair_ids, pair_mask = batch([3, 6, 1, 4], seed=1)
    labels = torch.tensor([0, 1, 2, 1])
    logits = model(ids, mask, pair_ids, pair_mask).logits if pair else model(ids, mask).logits
    F.cross_entropy(logits, labels).backward()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{n} got no gradient"
        else:
            assert p.grad is None, f"frozen {n} got a gradient"
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for n, before in frozen.items():
        assert torch.equal(dict(model.named_parameters())[n], before), f"frozen {n} changed"


@variant
@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_safetensors_round_trip(name, overrides, pair, tmp_path):
    cfg, model = build(name, overrides, seed=0, pair=pair)
    model.eval()
    ids, mask = batch([5, 2, 7])
    pair_ids, pair_mask = batch([3, 6, 1], seed=1) if pair else (None, None)
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous().clone() for k, v in model.state_dict().items()}, str(path))
    _, rebuilt = build(name, overrides, seed=123, pair=pair)  # different init, pretrained=None: as when a run is reloaded
    rebuilt.load_state_dict(load_file(str(path)))
    rebuilt.eval()
    assert all(k.startswith(("encoder.", "head.")) for k in model.state_dict())
    assert torch.equal(model(ids, mask, pair_ids, pair_mask).logits, rebuilt(ids, mask, pair_ids, pair_mask).logits)


@variant
def test_eval_is_deterministic_and_train_dropout_is_not(name, overrides):
    _, model = build(name, overrides)
    ids, mask = batch([12, 15, 9, 14, 11, 13], seed=5)
    model.eval()
    assert torch.equal(model(ids, mask).logits, model(ids, mask).logits)
    if name in HAS_DROPOUT:
        model.train()
        assert not torch.equal(model(ids, mask).logits, model(ids, mask).logits)


@variant
@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_padding_does_not_change_logits(name, overrides, pair):
    _, model = build(name, overrides, pair=pair)
    model.eval()
    lengths, pair_lengths = [5, 1, 3, 7, 2], [2, 6, 4, 1, 8]
    ids, mask = batch(lengths, total=10)  # padded beyond the longest row too
    pair_ids, pair_mask = batch(pair_lengths, total=9, seed=1)
    with torch.no_grad():
        padded = model(ids, mask, pair_ids, pair_mask).logits if pair else model(ids, mask).logits
        for row, (n, m) in enumerate(zip(lengths, pair_lengths)):
            alone_ids, alone_mask = ids[row:row + 1, :n], mask[row:row + 1, :n]
            if pair:
                alone = model(alone_ids, alone_mask, pair_ids[row:row + 1, :m], pair_mask[row:row + 1, :m]).logits
            else:
                alone = model(alone_ids, alone_mask).logits
            torch.testing.assert_close(padded[row:row + 1], alone, atol=1e-5, rtol=0)


@variant
def test_pretrained_vectors_initialise_the_embeddings(name, overrides):
    if name == "bow":  # its "embedding" is the head's score table: no vectors fit it
        with pytest.raises(TextnnError):
            build(name, overrides, pretrained=vectors(CLASSES))
        return
    if name in NO_VECTORS:  # encoders without word vectors: the task refuses data.vectors up front
        from textnn.resolve import config_from_dict

        raw = {"task": "classification", "data": {"train": "t.tsv", "vectors": "v.txt"}, "model": {"name": name}}
        with pytest.raises(TextnnError, match="does not start from word vectors"):
            config_from_dict(raw, "x.yaml")
        return
    config_cls, _, presets = model_entry(name)
    cfg = presets["tiny"].options(**{k: v for k, v in overrides.items() if k != "head"})
    if getattr(cfg, "mode", None) == "rand":
        with pytest.raises(TextnnError, match="rand"):
            build(name, overrides, pretrained=vectors(cfg.embedding_dim))
        return
    given = vectors(cfg.embedding_dim)
    _, model = build(name, overrides, pretrained=given)
    tables = embedding_params(model)
    assert tables
    keep = torch.arange(VOCAB) != PAD
    for n, table in tables.items():
        assert torch.equal(table.detach()[keep], given[keep]), n
        assert torch.count_nonzero(table.detach()[PAD]) == 0, f"{n}: padding row must be zero"
    with pytest.raises(TextnnError, match="embedding_dim"):
        build(name, overrides, pretrained=vectors(cfg.embedding_dim + 1))


def test_every_family_has_tiny_and_paper_presets():
    for name in CLASSIFIERS:
        config_cls, model_cls, presets = model_entry(name)
        assert {"tiny", "paper"} <= set(presets), name
        for preset in presets.values():
            assert isinstance(preset.model, config_cls), name
            ClassificationHeadConfig(**preset.head.given())
        _, model = build(name)
        assert model.num_parameters() < 10_000, f"{name} tiny preset is not tiny"


# -------------------------------------------------------------------------------- family specifics


@pytest.mark.parametrize("mode", ["static", "non-static", "multichannel"])
def test_cnn_pretrained_modes_after_training(mode):
    given = vectors(8)
    _, model = build("cnn", {"mode": mode}, pretrained=given)
    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
    ids, mask = batch([5, 2, 7, 4])
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(ids, mask).logits, torch.tensor([0, 1, 2, 1])).backward()
        opt.step()
        model.after_optimizer_step()
    keep = torch.arange(VOCAB) != PAD
    trained = model.encoder.embedding.weight.detach()[keep]
    if mode == "static":
        assert torch.equal(trained, given[keep])
    else:
        assert not torch.equal(trained, given[keep])
    if mode == "multichannel":
        assert torch.equal(model.encoder.static_embedding.weight.detach()[keep], given[keep])


@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_cnn_max_norm_constraint(pair):
    _, model = build("cnn", pair=pair)
    weight = model.head.output.weight  # [C, D] one row per class
    with torch.no_grad():
        weight.mul_(50.0)
        weight[0].fill_(0.01)  # one row inside the ball must not move
    small_row = weight[0].detach().clone()
    model.after_optimizer_step()
    assert (weight.norm(dim=1) <= 3.0 + 1e-6).all()
    assert torch.equal(weight[0], small_row)
    assert torch.allclose(weight[1:].norm(dim=1), torch.tensor(3.0))
    if pair:
        return
    # and after real optimizer steps with a large learning rate
    opt = torch.optim.SGD(model.parameters(), lr=100.0)
    ids, mask = batch([5, 2, 7])
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(ids, mask).logits, torch.tensor([0, 1, 2])).backward()
        opt.step()
        model.after_optimizer_step()
        assert (model.head.output.weight.norm(dim=1) <= 3.0 + 1e-6).all()


def test_cnn_multichannel_adds_both_channels():
    _, model = build("cnn", {"mode": "multichannel"})
    encoder = model.encoder
    with torch.no_grad():
        encoder.embedding.weight.add_(torch.randn_like(encoder.embedding.weight))  # channels now differ
    ids, mask = batch([5, 3])
    x1, x2 = encoder.embedding(ids), encoder.static_embedding(ids)
    conv = encoder.conv.convs[0]
    summed = F.conv1d(x1.transpose(1, 2), conv.weight) + F.conv1d(x2.transpose(1, 2), conv.weight) + \
        conv.bias.view(1, -1, 1)  # each filter on both channels, results added, one bias (Kim §2)
    windows = torch.tensor([[True] * 4, [True] * 2 + [False] * 2])  # width-2 windows of lengths 5 and 3
    expected = masked_max(F.relu(summed).transpose(1, 2), windows)
    got = encoder(ids, mask).sentence[:, :conv.out_channels]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_forget_gate_bias_sums_to_one(bidirectional):
    _, model = build("rnn", {"cell": "lstm", "bidirectional": bidirectional, "num_layers": 2})
    lstm = model.encoder.rnn.rnn
    hidden = lstm.hidden_size
    names = [n for n, _ in lstm.named_parameters() if n.startswith("bias_ih")]
    assert len(names) == 2 * (2 if bidirectional else 1)
    for name in names:
        ih, hh = getattr(lstm, name), getattr(lstm, name.replace("bias_ih", "bias_hh"))
        assert torch.equal(ih[hidden:2 * hidden] + hh[hidden:2 * hidden], torch.ones(hidden))


def test_dan_word_dropout_never_drops_every_token_and_is_off_in_eval():
    torch.manual_seed(0)
    _, mask = batch([1, 2, 3, 8, 20], total=20)
    for _ in range(50):
        kept = word_dropout_mask(mask, 0.95)
        assert (kept & ~mask).sum() == 0  # only real tokens are kept
        assert kept.any(dim=1).all()  # never all dropped
    rate = 1 - word_dropout_mask(torch.ones(200, 200, dtype=torch.bool), 0.3).float().mean()
    assert abs(rate - 0.3) < 0.02
    # Eval: a DAN with word dropout 0.9 gives exactly what the same weights give with no dropout.
    _, dropping = build("dan", {"word_dropout": 0.9})
    _, plain = build("dan", {"word_dropout": 0.0})
    plain.load_state_dict(dropping.state_dict())
    dropping.eval()
    plain.eval()
    ids, mask = batch([5, 2, 7])
    assert torch.equal(dropping(ids, mask).logits, plain(ids, mask).logits)


@pytest.mark.parametrize("name,field,value", [
    ("cbow", "embedding_dim", 0),
    ("deep_cbow", "num_layers", 0),
    ("dan", "word_dropout", 1.0),
    ("dan", "activation", "sigmoid"),
    ("cnn", "mode", "dynamic"),
    ("cnn", "filter_widths", [3, 0]),
    ("rnn", "cell", "tanh"),
    ("rnn", "pooling", "attention"),
    ("rnn", "dropout", -0.1),
    ("rnn", "hidden_size", 2.5),
])
def test_invalid_config_value_raises_naming_the_field(name, field, value):
    """(Head options are checked by the task's head config: tests/unit/test_heads.py.)"""
    config_cls, _, presets = model_entry(name)
    assert field in {f.name for f in dataclasses.fields(config_cls)}
    with pytest.raises(TextnnError) as err:
        presets["tiny"].options(**{field: value})
    assert field in str(err.value) and repr(value) in str(err.value)


# -------------------------------------------------------------------------------------- modules


def test_poolings_and_pair_features():
    x = torch.tensor([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]]])  # [1, 3, 2], last position padded
    mask = torch.tensor([[True, True, False]])
    assert torch.equal(masked_sum(x, mask), torch.tensor([[4.0, 2.0]]))
    assert torch.equal(masked_mean(x, mask), torch.tensor([[2.0, 1.0]]))
    assert torch.equal(masked_max(x, mask), torch.tensor([[3.0, 4.0]]))
    assert torch.equal(last_valid(x, mask), torch.tensor([[3.0, 4.0]]))
    empty = torch.zeros(1, 3, dtype=torch.bool)
    assert torch.equal(masked_max(x, empty), torch.zeros(1, 2)) and torch.equal(masked_mean(x, empty), torch.zeros(1, 2))
    u, v = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 1.0]])
    assert torch.equal(pair_features(u, v), torch.tensor([[1.0, -2.0, 3.0, 1.0, 2.0, 3.0, 3.0, -2.0]]))


def test_conv_short_sequences_use_one_zero_padded_window():
    torch.manual_seed(0)
    conv = MultiWidthConv(4, 3, [2, 5])
    x = torch.randn(1, 2, 4)  # 2 tokens, shorter than the widest filter
    out = conv(x, torch.ones(1, 2, dtype=torch.bool))
    padded = torch.cat([x, torch.zeros(1, 3, 4)], dim=1).transpose(1, 2)  # [1, 4, 5]
    expected_wide = F.relu(conv.convs[1](padded)).amax(dim=2)
    torch.testing.assert_close(out[:, 3:], expected_wide)
    expected_narrow = F.relu(conv.convs[0](x.transpose(1, 2))).amax(dim=2)  # one full window of width 2
    torch.testing.assert_close(out[:, :3], expected_narrow)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_rnn_encoder_matches_unpacked_run_and_final_states(cell):
    torch.manual_seed(0)
    enc = RNNEncoder(4, 5, cell, num_layers=2, bidirectional=True).eval()
    x = torch.randn(2, 6, 4)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    out = enc(x, mask)
    full, h_n = enc.rnn(x[1:, :3])
    h_n = h_n[0] if cell == "lstm" else h_n  # [layers*2, 1, H]
    torch.testing.assert_close(out[1:, :3], full)
    assert torch.count_nonzero(out[1, 3:]) == 0
    torch.testing.assert_close(last_valid(out[..., :5], mask)[1], h_n[-2, 0])  # forward final state
    torch.testing.assert_close(out[1, 0, 5:], h_n[-1, 0])  # backward final state sits at position 0
