"""Model harness for the sequence taggers (models/tagger.py, models/window_tagger.py) on "tiny" presets.

Every tagger configuration (both models x char features none/cnn/lstm x softmax/CRF output, plus
other cells, layers, windows and a frozen-embedding variant) is checked for: output shapes, a finite
positive loss, a gradient on every trainable parameter (frozen ones get none and stay put), a
safetensors round trip, eval determinism (and dropout in train mode), padding invariance (a padded
batch gives each sentence's own emissions, loss and decoding), and learning: a few steps on a toy
chunking pattern bring the loss down and the decoded tags up to the gold ones. Then the families'
own pieces: the window layer equals the per-window MLP of Collobert et al., the character encoders
equal direct computations, constrained decoding, pretrained vectors, presets and config checks.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.errors import TextnnError
from textnn.models.base import InputSpec
from textnn.models.tagger import PRESETS as RNN_PRESETS, RNNTagger, RNNTaggerConfig
from textnn.models.window_tagger import PRESETS as WINDOW_PRESETS, WindowTagger, WindowTaggerConfig
from textnn.modules.char_encoders import CharCNN, CharLSTM
from textnn.modules.heads import TaggerHead
from textnn.tasks.tagging import Tagger, TaggingHeadConfig
from textnn.training.checkpoint import load_weights, save_weights

HEAD_KEYS = {"output", "constrained"}

MODELS = {"rnn_tagger": (RNNTaggerConfig, RNNTagger, RNN_PRESETS),
          "window_tagger": (WindowTaggerConfig, WindowTagger, WINDOW_PRESETS)}
TAGS = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
TAG_IDS = {tag: i for i, tag in enumerate(TAGS)}
VOCAB, CHARS, CASINGS, PAD = 30, 12, 5, 1  # a word pad id other than 0 catches code that assumes 0

VARIANTS: list[tuple[str, dict, str]] = []
for _name in MODELS:
    for _chars in ("none", "cnn", "lstm"):
        for _output in ("softmax", "crf"):
            VARIANTS.append((_name, {"char_encoder": _chars, "output": _output}, f"{_name}-{_chars}-{_output}"))
VARIANTS += [
    ("rnn_tagger", {"cell": "gru", "num_layers": 2, "char_encoder": "cnn"}, "rnn_tagger-gru-2layers"),
    ("rnn_tagger", {"cell": "rnn", "casing_dim": 0, "constrained": False}, "rnn_tagger-elman-nocasing-free"),
    ("rnn_tagger", {"freeze_embeddings": True}, "rnn_tagger-frozen"),
    ("window_tagger", {"window": 1, "casing_dim": 0, "constrained": False}, "window_tagger-w1-nocasing-free"),
    ("window_tagger", {"window": 5, "char_encoder": "cnn", "char_width": 2}, "window_tagger-w5-cnn2"),
]
variant = pytest.mark.parametrize("name,overrides", [pytest.param(n, o, id=i) for n, o, i in VARIANTS])


def build(name: str, overrides: dict | None = None, pretrained: torch.Tensor | None = None, seed: int = 0,
          tags: list[str] = TAGS, scheme: str = "bioes") -> Tagger:
    """The tagger as the tagging task builds it: the family's encoder and a TaggerHead; `overrides` may set
    the head's `output` and `constrained` too."""
    config_cls, model_cls, presets = MODELS[name]
    values = dict(overrides or {})
    head_cfg = TaggingHeadConfig(**{**presets["tiny"].head.given(), **{k: values.pop(k) for k in HEAD_KEYS & set(values)}})
    cfg = presets["tiny"].options(**values)
    torch.manual_seed(seed)
    encoder = model_cls(cfg, InputSpec(vocab_size=VOCAB, pad_id=PAD, pretrained=pretrained, num_chars=CHARS,
                                       num_casings=CASINGS))
    return Tagger(encoder, TaggerHead(encoder.token_size, tags, scheme, head_cfg.output, head_cfg.constrained))


def chunk_tags(length: int, rng: random.Random) -> list[str]:
    """A valid BIOES tag sequence of the given length."""
    tags: list[str] = []
    while len(tags) < length:
        size = min(rng.randint(0, 3), length - len(tags))
        kind = rng.choice(["PER", "LOC"])
        if size == 0:
            tags.append("O")
        elif size == 1:
            tags.append(f"S-{kind}")
        else:
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (size - 2) + [f"E-{kind}"]
    return tags


def make_batch(lengths: list[int], total: int | None = None, char_total: int = 9, seed: int = 0) -> dict:
    """Right-padded inputs: words (PAD), chars (0, padding tokens all-zero), casing (0), mask, gold tags."""
    rng = random.Random(seed)
    total = total or max(lengths)
    words = torch.full((len(lengths), total), PAD, dtype=torch.long)
    chars = torch.zeros((len(lengths), total, char_total), dtype=torch.long)
    casing = torch.zeros((len(lengths), total), dtype=torch.long)
    mask = torch.zeros((len(lengths), total), dtype=torch.bool)
    tags = torch.zeros((len(lengths), total), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = True
        words[row, :n] = torch.tensor([rng.randrange(PAD + 1, VOCAB) for _ in range(n)])
        casing[row, :n] = torch.tensor([rng.randrange(1, CASINGS) for _ in range(n)])
        tags[row, :n] = torch.tensor([TAG_IDS[t] for t in chunk_tags(n, rng)])
        for t in range(n):
            k = rng.randint(1, char_total - 2)  # words shorter than the char padding
            chars[row, t, :k] = torch.tensor([rng.randrange(1, CHARS) for _ in range(k)])
    return {"words": words, "chars": chars, "casing": casing, "mask": mask, "tags": tags}


def run(model, b: dict) -> torch.Tensor:
    return model(b["words"], b["chars"], b["casing"], b["mask"]).logits


def valid_bioes(tags: list[str]) -> bool:
    open_type = None
    for tag in tags:
        prefix, _, kind = tag.partition("-")
        if prefix in ("I", "E") and open_type != kind:
            return False
        if prefix in ("B", "S", "O") and open_type is not None:
            return False
        open_type = kind if prefix in ("B", "I") else None
    return open_type is None


# ---------------------------------------------------------------------------------------- harness


@variant
def test_shapes_finite_loss_and_decoding(name, overrides):
    model = build(name, overrides).eval()
    b = make_batch([5, 2, 7])
    emissions = run(model, b)
    assert emissions.shape == (3, 7, len(TAGS))
    nll = model.head.nll(emissions, b["tags"], b["mask"])
    assert nll.shape == (3,) and torch.isfinite(nll).all() and (nll > 0).all()
    decoded = model.head.decode(emissions, b["mask"])
    assert decoded.shape == (3, 7) and decoded.dtype == torch.long
    assert decoded[~b["mask"]].eq(0).all() and decoded.min() >= 0 and decoded.max() < len(TAGS)


@variant
def test_every_trainable_parameter_gets_a_gradient(name, overrides):
    model = build(name, overrides).train()
    b = make_batch([5, 2, 7, 4], total=8)
    model.head.nll(run(model, b), b["tags"], b["mask"]).sum().backward()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    assert bool(frozen) == bool(overrides.get("freeze_embeddings"))
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{n} got no gradient"
            assert torch.isfinite(p.grad).all(), n
        else:
            assert p.grad is None, f"frozen {n} got a gradient"
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for n, before in frozen.items():
        assert torch.equal(dict(model.named_parameters())[n], before), f"frozen {n} changed"


@variant
def test_safetensors_round_trip(name, overrides, tmp_path):
    model = build(name, overrides, seed=0).eval()
    other = build(name, overrides, seed=123).eval()  # different init, no vectors: as when a run is reloaded
    b = make_batch([5, 2, 7])
    assert not torch.allclose(run(model, b), run(other, b))
    save_weights(model, tmp_path / "model.safetensors")
    load_weights(other, tmp_path / "model.safetensors")
    assert torch.equal(run(model, b), run(other, b))
    assert torch.equal(model.head.decode(run(model, b), b["mask"]), other.head.decode(run(other, b), b["mask"]))


@variant
def test_eval_is_deterministic_and_train_dropout_is_not(name, overrides):
    model = build(name, overrides)
    b = make_batch([9, 12, 7, 11], seed=5)
    model.eval()
    assert torch.equal(run(model, b), run(model, b))
    model.train()
    assert not torch.equal(run(model, b), run(model, b))


@variant
def test_padding_does_not_change_emissions_loss_or_decoding(name, overrides):
    model = build(name, overrides).eval()
    lengths = [5, 1, 3, 7, 2]
    b = make_batch(lengths, total=10, char_total=9, seed=3)  # padded beyond the longest row and word
    with torch.no_grad():
        emissions = run(model, b)
        nll = model.head.nll(emissions, b["tags"], b["mask"])
        decoded = model.head.decode(emissions, b["mask"])
        for row, n in enumerate(lengths):
            longest = int((b["chars"][row, :n] != 0).sum(-1).max())
            alone = {"words": b["words"][row:row + 1, :n], "chars": b["chars"][row:row + 1, :n, :longest],
                     "casing": b["casing"][row:row + 1, :n], "mask": b["mask"][row:row + 1, :n],
                     "tags": b["tags"][row:row + 1, :n]}
            own = run(model, alone)
            torch.testing.assert_close(emissions[row:row + 1, :n], own, atol=1e-5, rtol=0)
            torch.testing.assert_close(nll[row:row + 1], model.head.nll(own, alone["tags"], alone["mask"]),
                                       atol=1e-4, rtol=1e-5)
            assert torch.equal(decoded[row:row + 1, :n], model.head.decode(own, alone["mask"]))


def toy_chunks(count: int, seed: int) -> dict:
    """A learnable chunking pattern: entity words (ids 16-29, PER below 23, LOC from 23) form chunks of
    one type, separated by ordinary words (2-15); a word's tag depends on its neighbours (B/I/E/S)."""
    rng = random.Random(seed)
    spelling = {w: [rng.randrange(1, CHARS) for _ in range(rng.randint(1, 5))] for w in range(VOCAB)}
    sentences = []
    for _ in range(count):
        words, tags = [], []
        target = rng.randint(3, 10)
        while len(words) < target:  # whole chunks only, so the gold tags are valid BIOES
            words.append(rng.randrange(2, 16))
            tags.append("O")
            size, kind = rng.randint(0, 3), rng.choice(["PER", "LOC"])
            low, high = (16, 23) if kind == "PER" else (23, 30)
            words += [rng.randrange(low, high) for _ in range(size)]
            tags += (["S-" + kind] if size == 1 else
                     ["B-" + kind] + ["I-" + kind] * (size - 2) + ["E-" + kind] if size else [])
        sentences.append((words, tags))
    total = max(len(w) for w, _ in sentences)
    b = {"words": torch.full((count, total), PAD), "chars": torch.zeros((count, total, 5), dtype=torch.long),
         "casing": torch.zeros((count, total), dtype=torch.long), "mask": torch.zeros((count, total), dtype=torch.bool),
         "tags": torch.zeros((count, total), dtype=torch.long)}
    for row, (words, tags) in enumerate(sentences):
        n = len(words)
        b["words"][row, :n] = torch.tensor(words)
        b["mask"][row, :n] = True
        b["tags"][row, :n] = torch.tensor([TAG_IDS[t] for t in tags])
        b["casing"][row, :n] = torch.tensor([2 if w >= 16 else 1 for w in words])
        for t, w in enumerate(words):
            b["chars"][row, t, :len(spelling[w])] = torch.tensor(spelling[w])
    return b


@variant
def test_training_a_few_steps_learns_a_toy_chunking_pattern(name, overrides):
    model = build(name, overrides)
    b = toy_chunks(24, seed=1)
    tokens = b["mask"].sum()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
    losses = []
    for _ in range(40):
        model.train()
        loss = model.head.nll(run(model, b), b["tags"], b["mask"]).sum() / tokens
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        final = float(model.head.nll(run(model, b), b["tags"], b["mask"]).sum() / tokens)
        decoded = model.head.decode(run(model, b), b["mask"])
    accuracy = float((decoded == b["tags"])[b["mask"]].float().mean())
    assert final < 0.25 * losses[0], (losses[0], final)
    assert accuracy > 0.8, accuracy


# -------------------------------------------------------------------------------- family specifics


def test_window_layer_is_the_per_window_mlp_with_padding_words():
    """Collobert et al. (2011) §3.3.1 written out: concatenate the features of each window (PADDING
    outside the sentence), Linear -> HardTanh -> Linear; the convolution must give the same scores."""
    model = build("window_tagger", {"window": 5, "char_encoder": "cnn"}).eval()
    b = make_batch([6, 2], total=7, seed=4)
    with torch.no_grad():
        got = run(model, b)
        encoder = model.encoder
        features = torch.cat([encoder.word_embedding(b["words"]), encoder.char_encoder(b["chars"]),
                              encoder.casing_embedding(b["casing"])], dim=-1)  # [B, T, D]
        conv = encoder.window_layer
        hidden_size, dim, width = conv.weight.shape
        linear_weight = conv.weight.permute(0, 2, 1).reshape(hidden_size, width * dim)  # [H, W, D] -> [H, W*D]
        for row, n in enumerate([6, 2]):
            padded = [encoder.padding_features] * 2 + list(features[row, :n]) + [encoder.padding_features] * 2
            for t in range(n):
                window = torch.cat(padded[t:t + width])  # [W*D], positions t-2 .. t+2
                hidden = F.hardtanh(linear_weight @ window + conv.bias)
                expected = model.head.scores(hidden)
                torch.testing.assert_close(got[row, t], expected, atol=1e-5, rtol=1e-5)


def test_char_cnn_equals_a_direct_wide_convolution_and_padding_rows_are_zero():
    torch.manual_seed(0)
    cnn = CharCNN(num_chars=CHARS, char_dim=4, num_filters=6, width=3, dropout=0.5).eval()
    chars = torch.zeros(2, 3, 8, dtype=torch.long)
    chars[0, 0, :5] = torch.tensor([3, 1, 4, 1, 5])
    chars[0, 1, :1] = torch.tensor([9])  # a one-character word still gets width-3 windows
    chars[1, 0, :2] = torch.tensor([2, 6])  # row 0 token 2 and row 1 tokens 1-2 are padding tokens
    out = cnn(chars)
    assert out.shape == (2, 3, 6)
    for (row, tok), n in {(0, 0): 5, (0, 1): 1, (1, 0): 2}.items():
        x = cnn.embedding(chars[row, tok, :n]).T.unsqueeze(0)  # [n, E] -> [1, E, n]
        expected = torch.tanh(F.conv1d(x, cnn.conv.weight, cnn.conv.bias, padding=2)).amax(dim=2)[0]  # [F]
        torch.testing.assert_close(out[row, tok], expected)
    assert out[0, 2].eq(0).all() and out[1, 1:].eq(0).all()
    empty = cnn(torch.zeros(1, 2, 4, dtype=torch.long))
    assert empty.shape == (1, 2, 6) and empty.eq(0).all()


def test_char_lstm_returns_final_forward_and_backward_states():
    torch.manual_seed(0)
    encoder = CharLSTM(num_chars=CHARS, char_dim=4, hidden_size=3).eval()
    chars = torch.zeros(2, 2, 6, dtype=torch.long)
    chars[0, 0, :4] = torch.tensor([3, 1, 4, 1])
    chars[1, 0, :2] = torch.tensor([5, 9])
    chars[1, 1, :6] = torch.tensor([2, 6, 5, 3, 5, 8])
    out = encoder(chars)
    assert out.shape == (2, 2, 6)
    for (row, tok), n in {(0, 0): 4, (1, 0): 2, (1, 1): 6}.items():
        states, _ = encoder.lstm(encoder.embedding(chars[row, tok, :n]).unsqueeze(0))  # [1, n, 2H]
        torch.testing.assert_close(out[row, tok, :3], states[0, -1, :3])  # forward after the last char
        torch.testing.assert_close(out[row, tok, 3:], states[0, 0, 3:])  # backward after the first char
    assert out[0, 1].eq(0).all()
    hidden = encoder.lstm.hidden_size
    torch.testing.assert_close(encoder.lstm.bias_ih_l0[hidden:2 * hidden] + encoder.lstm.bias_hh_l0[hidden:2 * hidden],
                               torch.ones(hidden))
    empty = encoder(torch.zeros(1, 2, 4, dtype=torch.long))
    assert empty.shape == (1, 2, 6) and empty.eq(0).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_constrained_crf_decodes_valid_bioes_even_from_random_weights(name):
    constrained = build(name, {"output": "crf", "constrained": True}).eval()
    free = build(name, {"output": "crf", "constrained": False}).eval()
    invalid_free = 0
    for seed in range(10):
        b = make_batch([7, 4, 9], seed=seed)
        for model in (constrained, free):
            with torch.no_grad():
                model.head.scores.weight.normal_(std=2.0)  # strong, arbitrary emissions
            decoded = model.head.decode(run(model, b), b["mask"])
            ok = [valid_bioes([TAGS[i] for i in decoded[r, :n]]) for r, n in enumerate([7, 4, 9])]
            if model is constrained:
                assert all(ok)
            else:
                invalid_free += ok.count(False)
    assert invalid_free > 0  # without constraints the same emissions do give invalid sequences


@pytest.mark.parametrize("name", list(MODELS))
def test_pretrained_vectors_initialise_the_word_embeddings(name):
    dim = MODELS[name][2]["tiny"].model.word_dim
    given = torch.randn(VOCAB, dim, generator=torch.Generator().manual_seed(3))
    model = build(name, pretrained=given)
    keep = torch.arange(VOCAB) != PAD
    assert torch.equal(model.encoder.word_embedding.weight.detach()[keep], given[keep])
    assert model.encoder.word_embedding.weight.detach()[PAD].eq(0).all()
    with pytest.raises(TextnnError, match=f"model.word_dim={dim + 2}"):
        build(name, pretrained=torch.randn(VOCAB, dim + 2))


@pytest.mark.parametrize("name", list(MODELS))
def test_tag_names_must_fit_the_scheme(name):
    with pytest.raises(TextnnError, match="E-PER"):
        build(name, {"output": "crf", "constrained": True}, scheme="bio")
    build(name, {"output": "softmax"}, scheme="bio")  # no constraints, so any tag names will do
    build(name, tags=["O", "I-PER", "B-PER"], scheme="iob1")


def test_presets_build_and_follow_the_papers():
    for name, (config_cls, model_cls, presets) in MODELS.items():
        assert {"tiny", "paper"} <= set(presets), name
        for preset in presets.values():
            assert isinstance(preset.model, config_cls), name
            TaggingHeadConfig(**preset.head.given())
        assert build(name).num_parameters() < 5_000, f"{name} tiny preset is not tiny"
    lample = RNN_PRESETS["paper"].options()
    assert (lample.word_dim, lample.char_encoder, lample.char_dim, lample.char_hidden, lample.hidden_size,
            lample.dropout, RNN_PRESETS["paper"].head.output) == (100, "lstm", 25, 25, 100, 0.5, "crf")
    ma_hovy = RNN_PRESETS["ma_hovy"].options()
    assert (ma_hovy.char_encoder, ma_hovy.char_dim, ma_hovy.char_filters, ma_hovy.char_width, ma_hovy.hidden_size,
            ma_hovy.dropout, RNN_PRESETS["ma_hovy"].head.output) == ("cnn", 30, 30, 3, 200, 0.5, "crf")
    collobert = WINDOW_PRESETS["paper"].options()
    assert (collobert.window, collobert.word_dim, collobert.casing_dim, collobert.hidden_size) == (5, 50, 5, 300)


def test_lstm_forget_gate_bias_sums_to_one():
    lstm = build("rnn_tagger", {"cell": "lstm"}).encoder.rnn.rnn
    hidden = lstm.hidden_size
    for name in (n for n, _ in lstm.named_parameters() if n.startswith("bias_ih")):
        ih, hh = getattr(lstm, name), getattr(lstm, name.replace("bias_ih", "bias_hh"))
        torch.testing.assert_close(ih[hidden:2 * hidden] + hh[hidden:2 * hidden], torch.ones(hidden))


@pytest.mark.parametrize("name,field,value", [
    ("rnn_tagger", "char_encoder", "gru"),
    ("rnn_tagger", "cell", "transformer"),
    ("rnn_tagger", "dropout", 1.0),
    ("rnn_tagger", "hidden_size", 0),
    ("rnn_tagger", "casing_dim", -1),
    ("rnn_tagger", "char_width", 2.5),
    ("window_tagger", "window", 4),
    ("window_tagger", "window", 0),
    ("window_tagger", "word_dim", 0),
    ("window_tagger", "dropout", -0.1),
])
def test_invalid_config_value_raises_naming_the_field(name, field, value):
    config_cls, _, presets = MODELS[name]
    assert field in {f.name for f in dataclasses.fields(config_cls)}
    with pytest.raises(TextnnError) as err:
        presets["tiny"].options(**{field: value})
    assert f"model.{field}" in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize("field,value", [("output", "hmm"), ("output", "svm")])
def test_invalid_head_value_raises_naming_the_field(field, value):
    with pytest.raises(TextnnError) as err:
        TaggingHeadConfig(**{field: value})
    assert f"head.{field}" in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize("name", list(MODELS))
def test_registry_entry_points_to_these_classes(name):
    config_cls, model_cls, presets = registry.model_entry(name)
    assert (config_cls, model_cls, presets) == MODELS[name]

