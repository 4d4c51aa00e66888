"""The task protocol is declared: abstract methods, declared capabilities that match what a class has,
and one Batch base whose `to` moves every tensor."""

import dataclasses

import pytest
import torch

from textnn import registry
from textnn.data.batching import Batch, OnDevice
from textnn.models.base import EncoderWithHead
from textnn.tasks.base import CAPABILITIES, BatchTask, Task


@pytest.mark.parametrize("name", sorted(registry.TASKS))
def test_every_task_implements_the_protocol(name):
    cls = registry.task_class(name)
    assert issubclass(cls, Task)
    assert not cls.__abstractmethods__, f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} undefined"
    for capability in CAPABILITIES:  # a declared capability has its method, and a method is declared
        assert (capability in cls.capabilities) == callable(getattr(cls, capability, None)), (cls, capability)


def test_a_task_missing_a_method_cannot_be_made():
    class Half(BatchTask):
        unusable_reason = classmethod(lambda cls, encoder_cls: None)

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_an_unknown_capability_is_refused():
    with pytest.raises(TypeError, match="unknown"):
        type("Odd", (Task,), {"capabilities": frozenset({"fly"})})


@pytest.mark.parametrize("name", sorted(registry.ENCODERS))
def test_encoder_capabilities_match_their_methods(name):
    cls = registry.encoder_class(name)
    if not hasattr(cls, "gives_layers"):  # an encoder-decoder family
        return
    assert cls.gives_layers == callable(getattr(cls, "hidden_layers", None))
    assert cls.gives_attention == callable(getattr(cls, "forward_with_attention", None))
    assert cls.gives_cells == callable(getattr(cls, "memory_cells", None))


def test_only_attention_models_show_attention():
    from textnn.tasks.language_modeling import AttentionLanguageModel, LanguageModel

    assert AttentionLanguageModel.shows_attention and not LanguageModel.shows_attention
    assert not EncoderWithHead.shows_attention


@dataclasses.dataclass
class Inner(OnDevice):
    ids: torch.Tensor


@dataclasses.dataclass
class Example(Batch):
    ids: torch.Tensor
    mask: torch.Tensor
    index: list
    inner: Inner | None = None
    extra: torch.Tensor | None = None


def test_batch_defaults_and_to_moves_every_tensor(monkeypatch):
    moved = []
    real_to = torch.Tensor.to

    def spy(self, *args, **kwargs):
        moved.append(tuple(self.shape))
        return real_to(self, *args, **kwargs)

    batch = Example(torch.zeros(2, 3, dtype=torch.long), torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool),
                    [4, 7], Inner(torch.ones(5)), None)
    assert batch.count == 2 and batch.num_tokens == 3 and batch.lr_scale == 1.0
    monkeypatch.setattr(torch.Tensor, "to", spy)
    out = batch.to(torch.device("cpu"))
    assert sorted(moved) == sorted([(2, 3), (2, 3), (5,)])
    assert out.index == [4, 7] and out.extra is None and isinstance(out.inner, Inner)
