"""Parameter groups: layer groups, no weight decay where it does harm, layer-wise learning rates,
gradual unfreezing, and their exact round trip through a checkpoint."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from torch import nn

from textnn.runs import RunDir
from textnn.tasks.language_modeling import LanguageModelingTask, language_model
from textnn.training.checkpoint import load_checkpoint, save_checkpoint
from textnn.training.optim import build_optimizer, parameter_groups, set_lr, trainable_depth
from textnn.training.trainer import Trainer

CPU = torch.device("cpu")


def lm_config(model: str = "rnn_lm", data: dict | None = None, **train):
    data = {"format": "text", "bptt": 8, **(data or {})}
    return config_from_dict({"task": "language_modeling", "data": data,
                             "model": {"name": model, "preset": "tiny"},
                             "train": {"device": "cpu", "progress": False, **train}}, "test")


def owners(groups: list[dict]) -> dict[int, dict]:
    """id(parameter) -> the one group holding it (fails on a parameter held twice)."""
    held: dict[int, dict] = {}
    for group in groups:
        for param in group["params"]:
            assert id(param) not in held, f"a parameter is in both {held[id(param)]['name']} and {group['name']}"
            held[id(param)] = group
    return held


@pytest.mark.parametrize("no_decay", [False, True])
def test_every_trainable_parameter_is_in_exactly_one_group_and_a_tied_matrix_in_the_highest(no_decay):
    config = lm_config(no_decay=no_decay, weight_decay=0.1)
    model = language_model("rnn_lm", replace(config.model, tie_weights=True), 12)
    assert model.head.decoder.weight is model.encoder.embedding.weight
    model.encoder.rnn.bias_hh_l0.requires_grad_(False)  # a frozen parameter has no place in the optimizer
    held = owners(parameter_groups(model, config.train))
    assert set(held) == {id(p) for p in model.parameters() if p.requires_grad}
    # The tied matrix is the output layer too: it learns at the head's rate (fastai's ULMFiT LM split).
    assert held[id(model.encoder.embedding.weight)]["name"].split(".")[0] == "head"
    assert held[id(model.head.decoder.bias)]["name"].split(".")[0] == "head"
    untied = language_model("rnn_lm", replace(config.model, tie_weights=False), 12)
    assert owners(parameter_groups(untied, config.train))[id(untied.encoder.embedding.weight)]["name"].split(".")[0] \
        == "embedding"


class StrayParameter(nn.Module):
    """Two layer groups, and a parameter the model holds outside both of them."""

    def __init__(self) -> None:
        super().__init__()
        self.lower, self.upper = nn.Linear(3, 3), nn.Linear(3, 2)
        self.bias = nn.Parameter(torch.zeros(2))

    def layer_groups(self):
        return [("lower", [self.lower]), ("upper", [self.upper])]


def test_a_parameter_outside_every_layer_group_joins_the_top_group():
    config = config_from_dict({"task": "classification", "model": {"name": "bow"}}, "test")
    model = StrayParameter()
    groups = parameter_groups(model, config.train)
    held = owners(groups)
    assert set(held) == {id(p) for p in model.parameters()}
    assert held[id(model.bias)] is groups[-1] and groups[-1]["depth"] == 0


def test_no_decay_exempts_biases_norms_and_embedding_tables():
    config = lm_config("gpt", no_decay=True, weight_decay=0.1)
    model = language_model("gpt", config.model, 12)
    held = owners(parameter_groups(model, config.train))
    tables = {id(model.encoder.token_embedding.weight), id(model.encoder.position_embedding.weight)}
    kinds = {"decayed": 0, "bias or norm": 0, "embedding": 0}
    for name, param in model.named_parameters():
        group = held[id(param)]
        if param.ndim < 2 or id(param) in tables:
            assert group["weight_decay"] == 0.0 and group["name"].endswith(".no_decay"), name
            kinds["embedding" if id(param) in tables else "bias or norm"] += 1
        else:
            assert group["weight_decay"] == 0.1 and not group["name"].endswith(".no_decay"), name
            kinds["decayed"] += 1
    assert all(kinds.values()), kinds  # the model really has every kind
    everything = owners(parameter_groups(model, replace(config.train, no_decay=False)))
    assert {group["weight_decay"] for group in everything.values()} == {0.1}


def test_layer_lr_decay_divides_the_rate_by_2_6_per_layer_group_below_the_head():
    config = lm_config(layer_lr_decay=1 / 2.6)
    model = language_model("rnn_lm", config.model, 12)  # layer groups: embedding, rnn, head
    optimizer = build_optimizer(model, config.train, CPU)
    set_lr(optimizer, 0.01)
    rates = [group["lr"] for group in optimizer.param_groups]
    assert [group["name"] for group in optimizer.param_groups] == ["embedding", "rnn", "head"]
    assert rates[-1] == pytest.approx(0.01)  # the head trains at the base rate
    for lower, upper in zip(rates, rates[1:]):
        assert lower / upper == pytest.approx(1 / 2.6)  # ULMFiT: lr(l-1) = lr(l) / 2.6


def lm_task(tmp_path, **train) -> LanguageModelingTask:
    text = "".join(f"w{i % 7} w{i % 5} w{i % 3}\n" for i in range(120))
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    config = lm_config(data={"train": str(tmp_path / "train.txt"), "tokenizer": "whitespace", "bptt": 6},
                       batch_size=4, **train)
    return LanguageModelingTask.from_data(config)


def trainer_for(task, tmp_path, seed: int = 0) -> Trainer:
    torch.manual_seed(seed)
    run = RunDir(tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}")
    run.create(task.config, resume=False)
    return Trainer(task, task.build_model(), task.config.train, run)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_gradual_unfreezing_keeps_frozen_groups_bit_identical_and_unfreezes_on_schedule(tmp_path, optimizer):
    # weight decay and momentum would move a frozen group if it merely had a learning rate of 0
    task = lm_task(tmp_path, optimizer=optimizer, lr=0.05, momentum=0.9 if optimizer == "sgd" else 0.0,
                   weight_decay=0.1, unfreeze=2, unfreeze_unit="step", layer_lr_decay=0.5)
    trainer = trainer_for(task, tmp_path)
    groups = trainer.optimizer.param_groups
    assert [(g["name"], g["depth"]) for g in groups] == [("embedding", 2), ("rnn", 1), ("head", 0)]
    batches = task.train_batches(0)
    seen_rates = []
    real_step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (seen_rates.append([g["lr"] for g in groups]), real_step(*a, **k))[1]
    for step in range(7):
        before = [[p.detach().clone() for p in g["params"]] for g in groups]
        trainer._train_step([batches[step]], step=step)
        trains = min(3, 1 + step // 2)  # the head alone for 2 steps, then one more group every 2 steps
        for group, old in zip(groups, before):
            same = [torch.equal(p, q) for p, q in zip(group["params"], old)]
            if group["depth"] < trains:
                assert not all(same), (step, group["name"])
            else:
                assert all(same), (step, group["name"])  # bit-identical
                assert all(not trainer.optimizer.state[p] for p in group["params"])  # no momentum, no moments
        base = seen_rates[-1][-1]
        assert seen_rates[-1] == [0.0 if g["depth"] >= trains else base * 0.5 ** g["depth"] for g in groups]


def test_unfreezing_counts_epochs_or_steps():
    by_epoch = lm_config(unfreeze=1, unfreeze_unit="epoch").train
    points = [(0, 0), (99, 0), (100, 1), (5, 3)]  # (step, epoch)
    assert [trainable_depth(step, epoch, by_epoch) for step, epoch in points] == [1, 1, 2, 4]
    by_step = lm_config(unfreeze=3, unfreeze_unit="step").train
    assert [trainable_depth(step, 7, by_step) for step in (0, 2, 3, 8, 9)] == [1, 1, 2, 3, 4]
    assert trainable_depth(12, 5, lm_config().train) is None  # off: every group trains


def test_a_checkpoint_restores_every_group_and_refuses_another_layout(tmp_path):
    task = lm_task(tmp_path, optimizer="adamw", weight_decay=0.01, no_decay=True, layer_lr_decay=0.4,
                   unfreeze=1, unfreeze_unit="step")
    trainer = trainer_for(task, tmp_path)
    for step, batch in enumerate(task.train_batches(0)[:3]):
        trainer._train_step([batch], step=step)
    path = tmp_path / "last.safetensors"
    save_checkpoint(path, trainer.model, trainer.optimizer, {"step": 3})

    other = trainer_for(task, tmp_path, seed=1)
    assert load_checkpoint(path, other.model, other.optimizer) == {"step": 3}

    def hyper(optimizer):
        return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]

    assert hyper(other.optimizer) == hyper(trainer.optimizer)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    other_names = {id(p): n for n, p in other.model.named_parameters()}
    for mine, theirs in zip(trainer.optimizer.param_groups, other.optimizer.param_groups):
        assert [names[id(p)] for p in mine["params"]] == [other_names[id(p)] for p in theirs["params"]]
        for p, q in zip(mine["params"], theirs["params"]):
            assert torch.equal(p, q)
            assert trainer.optimizer.state[p].keys() == other.optimizer.state[q].keys()
            for key, value in trainer.optimizer.state[p].items():
                assert torch.equal(value, other.optimizer.state[q][key]), key
    # one more step each (same dropout draws, same starting state): identical
    batch = task.train_batches(0)[3]
    for t in (trainer, other):
        torch.manual_seed(3)
        task._state = None
        t._train_step([batch], step=3)
    for p, q in zip(trainer.model.parameters(), other.model.parameters()):
        assert torch.equal(p, q)

    plain = copy.deepcopy(task)
    plain.config = replace(task.config, train=replace(task.config.train, no_decay=False))
    without = Trainer(plain, plain.build_model(), plain.config.train, other.run)
    with pytest.raises(TextnnError, match=r"groups \[embedding\.no_decay \(1\), rnn \(4\).* model's \[embedding \(1\)"):
        load_checkpoint(path, without.model, without.optimizer)


def test_the_trainer_hands_each_group_its_own_rate_under_a_schedule(tmp_path):
    task = lm_task(tmp_path, lr=0.2, scheduler="linear", warmup_steps=4, layer_lr_decay=0.25)
    trainer = trainer_for(task, tmp_path)
    seen = []
    trainer.optimizer.step = lambda *a, **k: seen.append([g["lr"] for g in trainer.optimizer.param_groups])
    batches = task.train_batches(0)
    for step in range(2):
        trainer._train_step([batches[step]], step=step)
    for step, rates in enumerate(seen):
        base = 0.2 * (step + 1) / 4  # linear warmup
        assert rates == pytest.approx([base * 0.25 ** 2, base * 0.25, base])
    assert trainer.base_lr == pytest.approx(0.2 * 2 / 4)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_betas_reach_every_group(optimizer):
    config = lm_config(optimizer=optimizer, adam_beta1=0.7, adam_beta2=0.99, layer_lr_decay=0.5)
    model = language_model("rnn_lm", config.model, 12)
    built = build_optimizer(model, config.train, CPU)
    assert len(built.param_groups) > 1
    assert all(group["betas"] == (0.7, 0.99) for group in built.param_groups)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_runs_fused_on_the_cpu_and_matches_the_per_parameter_update(optimizer):
    """One fused kernel over all parameters; the weights it gives agree with torch's per-parameter loop."""
    config = lm_config(optimizer=optimizer, lr=0.01, weight_decay=0.01, layer_lr_decay=0.5)
    torch.manual_seed(0)
    model = language_model("rnn_lm", config.model, 12)
    reference = copy.deepcopy(model)
    built = build_optimizer(model, config.train, CPU)
    assert all(group["fused"] for group in built.param_groups)
    loop = type(built)(parameter_groups(reference, config.train), lr=0.01, betas=(0.9, 0.999), weight_decay=0.01,
                       foreach=False)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            ours.grad = torch.randn(ours.shape, generator=generator)
            theirs.grad = ours.grad.clone()
        built.step()
        loop.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_the_run_records_each_groups_rate_and_frozen_state_when_unfreezing_changes_them(tmp_path):
    """metrics.jsonl shows the rates the optimizer really used: at the first step and at each unfreezing."""
    task = lm_task(tmp_path, lr=0.05, unfreeze=2, unfreeze_unit="step", layer_lr_decay=0.5)
    trainer = trainer_for(task, tmp_path)
    batches = task.train_batches(0)
    for step in range(7):
        trainer._train_step([batches[step]], step=step)
    records = [r for r in trainer.run.read_metrics() if r["split"] == "groups"]
    assert [r["step"] for r in records] == [1, 3, 5]  # the head alone, then one more group every 2 steps
    for record in records:
        trains = 1 + (record["step"] - 1) // 2
        depth = {"embedding": 2, "rnn": 1, "head": 0}
        for name, group in record["groups"].items():
            assert group["frozen"] == (depth[name] >= trains)
            assert group["lr"] == (0.0 if group["frozen"] else pytest.approx(0.05 * 0.5 ** depth[name]))


def test_a_run_without_discriminative_rates_or_unfreezing_records_no_groups(tmp_path):
    task = lm_task(tmp_path, lr=0.05)
    trainer = trainer_for(task, tmp_path)
    trainer._train_step([task.train_batches(0)[0]], step=0)
    assert not [r for r in trainer.run.read_metrics() if r["split"] == "groups"]
