"""Feature-based use of a frozen BERT (tasks/features.py, modules/scalar_mix.py): the scalar mix, the
layer combinations, and a word-level tagger reading a frozen pre-trained encoder's layers."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tests.conftest import SUBWORD_CONLL
from textnn.experiment import seed_everything, train
from textnn.modules.scalar_mix import ScalarMix, combine_layers, combined_size
from textnn.resolve import config_from_dict
from textnn.tasks.tagging import TaggingTask


def test_scalar_mix_is_gamma_times_a_softmax_weighted_sum():
    layers = [torch.randn(2, 3, 4) for _ in range(3)]
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(0.5)
    s = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), dim=0)
    expected = 0.5 * (s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])
    assert torch.allclose(mix(layers), expected, atol=1e-6)
    mix(layers).sum().backward()
    assert mix.weights.grad is not None and mix.gamma.grad is not None


def test_scalar_mix_with_layer_norm_normalises_each_layer_per_position_before_weighting():
    layers = [torch.randn(2, 3, 4) * (i + 1) + i for i in range(3)]  # different scales and offsets
    mix = ScalarMix(3, layer_norm=True)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([1.0, 0.0, -1.0]))
        mix.gamma.fill_(2.0)
    s = torch.softmax(torch.tensor([1.0, 0.0, -1.0]), dim=0)
    expected = torch.zeros(2, 3, 4)
    for weight, layer in zip(s, layers):
        for b in range(2):
            for t in range(3):
                v = layer[b, t]
                mean = sum(v.tolist()) / 4
                var = sum((x - mean) ** 2 for x in v.tolist()) / 4
                expected[b, t] += weight * (v - mean) / math.sqrt(var + 1e-5)
    torch.testing.assert_close(mix(layers), 2.0 * expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["last", "sum4", "cat4"])
def test_layer_combinations(how):
    layers = [torch.full((1, 2, 3), float(i)) for i in range(6)]  # layer i holds i everywhere
    out = combine_layers(layers, how)
    assert out.shape[-1] == combined_size(how, 3, 6)
    if how == "last":
        assert torch.all(out == 5)
    elif how == "sum4":
        assert torch.all(out == 2 + 3 + 4 + 5)
    else:
        assert out[0, 0].tolist() == [2.0] * 3 + [3.0] * 3 + [4.0] * 3 + [5.0] * 3


CONLL = SUBWORD_CONLL + "\n"  # two sentences whose words WordPiece splits


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pre")
    rng = random.Random(0)
    words = "john paris reuters visited reported the a city news river".split()
    docs = ["\n".join(" ".join(rng.choice(words) for _ in range(6)).capitalize() + " ." for _ in range(4))
            for _ in range(6)]
    (root / "text.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    config = config_from_dict({"task": "pretraining", "model": {"name": "bert", "preset": "tiny"},
                               "data": {"train": str(root / "text.txt"), "wordpiece_vocab_size": 60,
                                        "max_length": 24, "cache": False},
                               "train": {"max_steps": 1, "progress": False, "bootstrap_samples": 0}}, "test")
    run, _ = train(config, root / "run")
    return run.path


@pytest.mark.parametrize("how", ["cat4", "mix"])
def test_a_tagger_reads_frozen_layers_and_only_the_tagger_and_mix_train(tmp_path, pretrained, how):
    (tmp_path / "ner.txt").write_text(CONLL * 3, encoding="utf-8")
    config = config_from_dict({"task": "tagging", "model": {"name": "rnn_tagger", "preset": "tiny"},
                               "data": {"train": str(tmp_path / "ner.txt"), "features_from": str(pretrained),
                                        "features_layers": how, "cache": False}}, "test")
    task = TaggingTask.from_data(config)
    seed_everything(0)
    model = task.build_model()
    assert model.encoder.context_dim == combined_size(how, 16, 2)  # tiny BERT: 2 layers of 16
    frozen_before = {k: v.clone() for k, v in model.frozen.encoder.state_dict().items()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    assert not model.frozen.encoder.training  # the frozen encoder never drops out
    batch = task.train_batches(0)[0]
    task.loss(model, batch).backward()
    assert all(p.grad is None for p in model.frozen.encoder.parameters())
    if how == "mix":
        assert model.frozen.mix.weights.grad is not None
    optimizer.step()
    after = model.frozen.encoder.state_dict()
    assert all(torch.equal(frozen_before[k], after[k]) for k in frozen_before)
    # the frozen encoder holds the pre-trained run's weights
    from safetensors.torch import load_file

    saved = load_file(str(pretrained / "model.safetensors"))
    assert torch.equal(after["token_embedding.weight"], saved["encoder.token_embedding.weight"])
    predicted, _ = task.decode_tags(model, task.splits["train"])
    assert [len(t) for t in predicted] == [len(s.tokens) for s in task.splits["train"].sentences]
