"""The task heads (modules/heads.py) against hand computation, and which encoder serves which task."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textnn import registry
from textnn.errors import TextnnError
from textnn.modules.heads import (AdaptiveLMHead, ClassifierHead, LMHead, MLMHead, PairClassifierHead, RegressionHead, SpanHead,
                                  TaggerHead)
from textnn.tasks.classification import ClassificationHeadConfig

TAGS = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]


def test_classifier_head_is_dropout_then_linear_or_an_mlp():
    torch.manual_seed(0)
    x = torch.randn(3, 5)
    linear = ClassifierHead(5, 4).eval()
    torch.testing.assert_close(linear(x), x @ linear.output.weight.T + linear.output.bias)
    mlp = ClassifierHead(5, 4, hidden=6).eval()
    hidden_layer = mlp.net[1]
    expected = torch.tanh(x @ hidden_layer.weight.T + hidden_layer.bias) @ mlp.output.weight.T + mlp.output.bias
    torch.testing.assert_close(mlp(x), expected)
    dropping = ClassifierHead(5, 4, dropout=0.5).train()
    assert not torch.equal(dropping(x), dropping(x))


def test_pair_head_reads_u_v_their_distance_and_product():
    torch.manual_seed(0)
    u, v = torch.randn(2, 3), torch.randn(2, 3)
    head = PairClassifierHead(3, 2).eval()
    assert head.output.weight.shape == (2, 12)
    features = torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
    torch.testing.assert_close(head(u, v), features @ head.output.weight.T + head.output.bias)


def test_max_norm_rescales_only_rows_outside_the_ball():
    head = ClassifierHead(4, 3, max_norm=2.0)
    with torch.no_grad():
        head.output.weight.copy_(torch.tensor([[3.0, 4.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [0.0, 0.0, 6.0, 8.0]]))
    head.after_optimizer_step()
    torch.testing.assert_close(head.output.weight.norm(dim=1), torch.tensor([2.0, 0.1, 2.0]))
    torch.testing.assert_close(head.output.weight[0], torch.tensor([1.2, 1.6, 0.0, 0.0]))  # direction kept


def test_regression_head_gives_one_value_per_sentence():
    head = RegressionHead(4).eval()
    x = torch.randn(5, 4)
    out = head(x)
    assert out.shape == (5,)
    torch.testing.assert_close(out, (x @ head.output.weight.T + head.output.bias).squeeze(-1))


def test_tagger_head_softmax_likelihood_is_the_sum_of_token_cross_entropies():
    torch.manual_seed(0)
    head = TaggerHead(6, TAGS, "bioes", output="softmax")
    assert head.crf is None
    states = torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    tags = torch.tensor([[0, 4, 1, 0], [1, 2, 3, 0]])
    emissions = head(states)
    expected = torch.stack([F.cross_entropy(emissions[b][mask[b]], tags[b][mask[b]], reduction="sum") for b in range(2)])
    torch.testing.assert_close(head.nll(emissions, tags, mask), expected)
    decoded = head.decode(emissions, mask)
    assert torch.equal(decoded[mask], emissions.argmax(-1)[mask]) and decoded[0, 3] == 0


def test_tagger_head_crf_constraints_follow_the_scheme():
    free = TaggerHead(3, TAGS, "bioes", output="crf", constrained=False)
    constrained = TaggerHead(3, TAGS, "bioes", output="crf", constrained=True)
    assert free.crf is not None and constrained.crf is not None
    with pytest.raises(TextnnError, match="E-PER"):
        TaggerHead(3, TAGS, "bio", output="crf", constrained=True)  # E- is no BIO tag


def test_lm_head_tied_shares_the_embedding_and_counts_once():
    embedding = nn.Embedding(10, 4)
    tied = LMHead(4, 10, tied=embedding.weight)
    assert tied.decoder.weight is embedding.weight and torch.count_nonzero(tied.decoder.bias) == 0
    model = nn.ModuleDict({"embedding": embedding, "head": tied})
    assert sum(p.numel() for p in model.parameters()) == 10 * 4 + 10
    untied = LMHead(4, 10, bias=False)
    assert untied.decoder.bias is None and untied.decoder.weight is not embedding.weight


def test_mlm_head_transforms_then_scores_with_the_tied_embedding():
    torch.manual_seed(0)
    embedding = nn.Embedding(12, 8)
    head = MLMHead(8, 12, tied=embedding.weight).eval()
    x = torch.randn(2, 3, 8)
    h = F.layer_norm(F.gelu(head.transform(x)), (8,), head.norm.weight, head.norm.bias, eps=1e-12)
    torch.testing.assert_close(head(x), h @ embedding.weight.T + head.decoder.decoder.bias)


def test_span_head_never_points_outside_the_mask():
    head = SpanHead(4)
    states = torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 3 + [False] * 2, [True] * 5])
    start, end = head(states, mask)
    assert start.shape == end.shape == (2, 5)
    assert torch.isinf(start[0, 3:]).all() and torch.isinf(end[0, 3:]).all() and torch.isfinite(start[1]).all()
    assert start[0].argmax() < 3


@pytest.mark.parametrize("field, value", [("dropout", 1.0), ("hidden", -1), ("max_norm", -0.5), ("pooling", "attention")])
def test_classification_head_options_are_checked(field, value):
    with pytest.raises(TextnnError) as err:
        ClassificationHeadConfig(**{field: value})
    assert f"head.{field}" in str(err.value)


def test_which_tasks_an_encoder_serves_follows_from_what_it_gives():
    classifiers, taggers, lms = (registry.models_for(t) for t in ("classification", "tagging", "language_modeling"))
    # sentence encoders classify; token encoders also tag; causal token encoders also model language
    assert {"bow", "cnn", "dan", "rnn"} <= set(classifiers) and not {"bow", "cnn", "dan"} & set(taggers)
    assert {"rnn_tagger", "window_tagger", "rnn"} <= set(taggers)
    assert not {"rnn_tagger", "window_tagger"} & set(classifiers)  # they read characters classification lacks
    assert set(lms) == {"nplm", "rnn_lm", "char_lstm_lm", "awd_lstm", "gpt", "transformer_xl", "elmo"}
    causal = set(lms) - {"elmo"}
    assert causal <= set(classifiers) and causal <= set(taggers)  # a language model fine-tunes to both
    # ELMo's biLM reads each word's bytes, which only language modelling builds: the other tasks use it
    # as frozen features (data.features_from)
    assert "elmo" not in set(classifiers) | set(taggers)
    for name in registry.ENCODERS:
        cls = registry.encoder_class(name)
        assert cls.config_class is not None and {"tiny"} <= set(cls.presets), name


def test_a_task_refuses_an_encoder_it_cannot_use_naming_why():
    from textnn.resolve import config_from_dict

    raw = {"task": "language_modeling", "data": {"format": "text", "train": "t.txt"}, "model": {"name": "cnn"}}
    with pytest.raises(TextnnError, match="cnn cannot serve task language_modeling"):
        config_from_dict(raw, "x.yaml")
    raw = {"task": "tagging", "data": {"train": "t.conll"}, "model": {"name": "dan"}}
    with pytest.raises(TextnnError, match="no per-token states"):
        config_from_dict(raw, "x.yaml")


def test_the_adaptive_softmax_is_the_product_of_the_head_and_the_cluster_probabilities():
    """V = 7 cut at [2, 4]: head words 0-1 and two cluster entries; cluster 1 holds 2-3 (states projected
    to D / 2), cluster 2 holds 4-6 (D / 4). p(w) = p_head(w), or p_head(cluster) * p_cluster(w)."""
    torch.manual_seed(0)
    head = AdaptiveLMHead(8, 7, cutoffs=[2, 4], div_value=2.0)
    assert [tail[0].out_features for tail in head.tails] == [4, 2]
    states = torch.randn(5, 8)
    head_p = torch.softmax(torch.cat([states @ head.words.T + head.words_bias, head.clusters(states)], -1), -1)
    tail_p = [torch.softmax(tail[1](states @ tail[0].weight.T), -1) for tail in head.tails]
    expected = torch.cat([head_p[:, :2], head_p[:, 2:3] * tail_p[0], head_p[:, 3:4] * tail_p[1]], -1)  # [5, 7]
    log_probs = head(states)
    torch.testing.assert_close(log_probs.exp(), expected)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(5))
    targets = torch.tensor([0, 3, 6, 1, 4])
    torch.testing.assert_close(head.nll(states, targets), -log_probs.gather(1, targets[:, None]).squeeze(1))


def test_the_adaptive_softmax_loss_has_the_gradient_of_a_full_softmax_over_its_log_probabilities():
    """`nll` computes each tail only for its own rows; the gradient is that of cross-entropy over the
    exact log-probabilities of every word, for the states and every parameter."""
    torch.manual_seed(0)
    head = AdaptiveLMHead(6, 20, cutoffs=[4, 9, 15], div_value=1.5)
    states = torch.randn(12, 6, requires_grad=True)
    targets = torch.tensor([0, 3, 5, 8, 9, 14, 15, 19, 2, 10, 17, 1])

    def gradients(loss: torch.Tensor) -> list[torch.Tensor]:
        return torch.autograd.grad(loss, [states, *head.parameters()])

    sparse = gradients(head.nll(states, targets).sum())
    full = gradients(F.cross_entropy(head(states), targets, reduction="sum"))
    for a, b in zip(sparse, full):
        torch.testing.assert_close(a, b)


def test_a_tied_adaptive_softmax_scores_its_head_words_with_the_input_embedding():
    torch.manual_seed(0)
    embedding = nn.Embedding(10, 4)
    head = AdaptiveLMHead(4, 10, cutoffs=[3], tied=embedding.weight, bias=False)
    assert head.words is None and head.words_bias is None
    states = torch.randn(2, 4)
    head_scores = torch.cat([states @ embedding.weight[:3].T, head.clusters(states)], -1)  # [2, 3 + 1]
    torch.testing.assert_close(head(states)[:, :3], torch.log_softmax(head_scores, -1)[:, :3])
    head.nll(states, torch.tensor([1, 2])).sum().backward()
    assert embedding.weight.grad[:3].abs().sum() > 0 and embedding.weight.grad[3:].abs().sum() == 0
    with pytest.raises(ValueError, match="cutoffs"):
        AdaptiveLMHead(4, 10, cutoffs=[3, 10])


def test_each_head_describes_its_kind_and_sizes():
    embedding = nn.Parameter(torch.randn(20, 6))
    described = {
        "linear": ClassifierHead(6, 3).describe(),
        "mlp": ClassifierHead(6, 3, hidden=5, activation="relu").describe(),
        "normed": ClassifierHead(6, 3, batch_norm=True).describe(),
        "pair": PairClassifierHead(6, 2, hidden=4).describe(),
        "regression": RegressionHead(6).describe(),
        "crf": TaggerHead(6, TAGS, "bioes").describe(),
        "softmax": TaggerHead(6, TAGS, "bioes", output="softmax").describe(),
        "lm": LMHead(6, 20, tied=embedding, bias=False).describe(),
        "adaptive": AdaptiveLMHead(6, 20, [5, 12], div_value=2.0).describe(),
        "mlm": MLMHead(6, 20, tied=embedding).describe(),
        "span": SpanHead(6).describe(),
    }
    assert described == {
        "linear": {"kind": "linear classifier", "in": 6, "classes": 3, "hidden": 0, "batch_norm": False},
        "mlp": {"kind": "mlp classifier", "in": 6, "classes": 3, "hidden": 5, "batch_norm": False},
        "normed": {"kind": "batch-normed linear classifier", "in": 6, "classes": 3, "hidden": 0, "batch_norm": True},
        "pair": {"kind": "mlp pair classifier", "in": 6, "classes": 2, "hidden": 4, "batch_norm": False},
        "regression": {"kind": "linear regression", "in": 6, "hidden": 0, "batch_norm": False},
        "crf": {"kind": "crf tagger", "in": 6, "tags": len(TAGS), "constrained": True},
        "softmax": {"kind": "softmax tagger", "in": 6, "tags": len(TAGS), "constrained": False},
        "lm": {"kind": "lm", "in": 6, "vocab": 20, "tied": True, "bias": False},
        "adaptive": {"kind": "adaptive lm", "in": 6, "vocab": 20, "cutoffs": [5, 12], "div_value": 2.0,
                     "tied": False, "bias": True},
        "mlm": {"kind": "mlm", "in": 6, "vocab": 20, "tied": True, "eps": 1e-12},
        "span": {"kind": "span", "in": 6},
    }
    # the description is plain JSON (a run keeps it in run.json)
    assert json.loads(json.dumps(described)) == described


def test_every_head_in_modules_declares_what_it_is():
    from textnn.modules import heads

    classes = [c for c in vars(heads).values() if isinstance(c, type) and issubclass(c, heads.Head) and c is not heads.Head]
    assert len(classes) == 9  # SentenceHead and the eight heads it and Head are the base of
    undeclared = [c.__name__ for c in classes if c.describe is heads.Head.describe]
    assert not undeclared
    with pytest.raises(NotImplementedError, match="does not describe itself"):
        heads.Head().describe()


@pytest.mark.parametrize("raw, head_input", [({}, "sentence"), ({"head": {"sentence": "pooled", "pooling": "mean"}},
                                                                "tokens pooled by mean")])
def test_a_classifier_on_bert_says_whether_its_head_reads_the_pooled_vector(tmp_path, raw, head_input):
    from textnn.resolve import config_from_dict
    from textnn.tasks.classification import ClassificationTask

    (tmp_path / "train.tsv").write_text("sentence\tlabel\na good film\t1\na bad film\t0\n", encoding="utf-8")
    config = config_from_dict({"task": "classification", "model": {"name": "bert", "preset": "tiny"},
                               "data": {"format": "tsv", "train": str(tmp_path / "train.tsv"), "cache": False}, **raw},
                              "test")
    model = ClassificationTask.from_data(config).build_model()
    assert model.describe() == {"head": model.head.describe(), "head_input": head_input}
    assert model.describe()["head"]["kind"] == "linear classifier"


@pytest.mark.parametrize("kind, reads, pooler, expected", [
    ("linear classifier", "sentence", True, "BertForSequenceClassification"),
    ("linear regression", "sentence", True, "BertForSequenceClassification"),
    ("linear classifier", "sentence", False, "BertModel"),  # transformers would start a random pooler
    ("linear classifier", "tokens pooled by mean", True, "BertModel"),
    ("mlp classifier", "sentence", True, "BertModel"),
])
def test_a_bert_run_is_exported_as_sequence_classification_only_over_its_own_pooler(kind, reads, pooler, expected):
    from textnn.interop.huggingface import _architecture

    assert _architecture("bert", {"head": {"kind": kind}, "head_input": reads}, pooler=pooler) == expected
