"""NT-ASGD: the non-monotone trigger, the running average, evaluation on the average, checkpoints, the trainer hook."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from torch import nn

from textnn.resolve import config_from_dict
from textnn.runs import RunDir
from textnn.tasks.language_modeling import LanguageModelingTask, language_model
from textnn.training.checkpoint import load_checkpoint, save_checkpoint
from textnn.training.optim import NTASGD, after_evaluation, build_optimizer, evaluation_weights
from textnn.training.trainer import Trainer


def test_trigger_waits_for_a_score_worse_than_the_best_before_the_last_nonmono():
    optimizer = NTASGD([nn.Parameter(torch.zeros(2))], lr=1.0, nonmono=2)
    # 3.5 and 3.2 are worse than the latest best (3) but not than the best before the last two: no trigger.
    for value in (5.0, 4.0, 3.0, 3.5, 3.2):
        assert not optimizer.observe(value)
    assert optimizer.observe(4.5)  # worse than min(5, 4, 3): switch
    assert optimizer.param_groups[0]["averaging"] and not optimizer.averaged  # no averaged step yet
    assert not optimizer.observe(99.0)  # once on, it stays on
    assert optimizer.param_groups[0]["history"] == [5.0, 4.0, 3.0, 3.5, 3.2, 4.5]


def test_trigger_for_a_higher_is_better_metric_and_with_nonmono_zero():
    up = NTASGD([nn.Parameter(torch.zeros(1))], lr=1.0, nonmono=1)
    assert not any(up.observe(v, higher_is_better=True) for v in (0.5, 0.6, 0.55))
    assert up.observe(0.4, higher_is_better=True)  # below the best (0.6) of all but the last
    eager = NTASGD([nn.Parameter(torch.zeros(1))], lr=1.0, nonmono=0)
    assert not eager.observe(3.0) and not eager.observe(2.0)
    assert eager.observe(2.5)


def step_with_gradient(optimizer: NTASGD, param: nn.Parameter, grad: list[float]) -> None:
    param.grad = torch.tensor(grad)
    optimizer.step()


def test_average_is_the_mean_of_the_parameters_after_each_step_since_the_trigger():
    param = nn.Parameter(torch.zeros(2))
    optimizer = NTASGD([param], lr=1.0, nonmono=0)
    step_with_gradient(optimizer, param, [1.0, 0.0])  # plain SGD: p = [-1, 0], nothing averaged
    assert "ax" not in optimizer.state[param]
    optimizer.observe(1.0)
    optimizer.observe(2.0)  # trigger
    values = []
    for grad in ([-1.0, 2.0], [-2.0, 0.0], [-3.0, -4.0]):
        step_with_gradient(optimizer, param, grad)
        values.append(param.detach().clone())
    torch.testing.assert_close(param.detach(), torch.tensor([5.0, 2.0]))  # SGD still moves the parameter
    torch.testing.assert_close(optimizer.state[param]["ax"], torch.stack(values).mean(dim=0))
    assert optimizer.param_groups[0]["averaged_steps"] == 3


def test_evaluation_weights_swap_in_the_average_and_restore_the_trained_values():
    param = nn.Parameter(torch.zeros(3))
    optimizer = NTASGD([param], lr=0.5, nonmono=0)
    with evaluation_weights(optimizer):  # nothing averaged yet: the parameters as they are
        torch.testing.assert_close(param.detach(), torch.zeros(3))
    optimizer.observe(1.0)
    optimizer.observe(1.5)
    step_with_gradient(optimizer, param, [1.0, 2.0, 3.0])
    step_with_gradient(optimizer, param, [1.0, 2.0, 3.0])
    trained = param.detach().clone()  # [-1, -2, -3]; the average of [-.5, -1, -1.5] and it
    with evaluation_weights(optimizer):
        torch.testing.assert_close(param.detach(), torch.tensor([-0.75, -1.5, -2.25]))
    torch.testing.assert_close(param.detach(), trained)
    sgd = torch.optim.SGD([param], lr=0.1)
    with evaluation_weights(sgd):
        torch.testing.assert_close(param.detach(), trained)
    assert after_evaluation(sgd, 1.0, False) is None


def test_checkpoint_restores_the_average_and_the_trigger_state_exactly(tmp_path):
    def make(seed: int):
        torch.manual_seed(seed)
        model = nn.Linear(3, 2)
        return model, NTASGD(list(model.parameters()), lr=0.1, nonmono=1)

    model, optimizer = make(0)
    x = torch.randn(4, 3)
    for value in (3.0, 2.0, 2.5, 2.4):
        optimizer.observe(value)
    for _ in range(3):
        model(x).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    save_checkpoint(tmp_path / "ckpt.safetensors", model, optimizer, {"step": 3})
    restored, restored_optimizer = make(1)
    assert load_checkpoint(tmp_path / "ckpt.safetensors", restored, restored_optimizer) == {"step": 3}
    group, restored_group = optimizer.param_groups[0], restored_optimizer.param_groups[0]
    for key in ("history", "averaging", "averaged_steps", "nonmono"):
        assert restored_group[key] == group[key], key
    for a, b in zip(model.parameters(), restored.parameters()):
        torch.testing.assert_close(restored_optimizer.state[b]["ax"], optimizer.state[a]["ax"], rtol=0, atol=0)
    for m, o in ((model, optimizer), (restored, restored_optimizer)):  # one more step each: identical
        m(x).pow(2).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), restored.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(restored_optimizer.state[b]["ax"], optimizer.state[a]["ax"], rtol=0, atol=0)


def test_build_optimizer_makes_ntasgd_from_the_config():
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                               "model": {"name": "rnn_lm", "preset": "tiny"},
                               "train": {"optimizer": "ntasgd", "lr": 30.0, "ntasgd_nonmono": 3,
                                         "weight_decay": 1.2e-6}}, "test")
    model = language_model("rnn_lm", config.model, 10)
    optimizer = build_optimizer(model, config.train, torch.device("cpu"))
    assert isinstance(optimizer, NTASGD)
    group = optimizer.param_groups[0]  # one group per layer group; the trigger state lives in the first
    assert (group["lr"], group["nonmono"], group["weight_decay"]) == (30.0, 3, 1.2e-6)
    assert len(optimizer.param_groups) > 1 and all("nonmono" not in g for g in optimizer.param_groups[1:])


def test_trainer_evaluates_and_saves_the_averaged_weights_after_the_trigger(tmp_path, monkeypatch):
    text = "".join(f"w{i % 7} w{i % 5} w{i % 3}\n" for i in range(200))
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    (tmp_path / "dev.txt").write_text(text[:300], encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": "whitespace", "bptt": 5},
        "model": {"name": "rnn_lm", "preset": "tiny"},
        "train": {"optimizer": "ntasgd", "lr": 0.5, "ntasgd_nonmono": 1, "max_steps": 8, "eval_every": 1,
                  "batch_size": 4, "device": "cpu", "progress": False}}, "test")
    task = LanguageModelingTask.from_data(config)
    torch.manual_seed(0)
    model = task.build_model()
    run = RunDir(tmp_path / "run")
    run.create(config, resume=False)
    trainer = Trainer(task, model, config.train, run)
    # nonmono 1: the 4th score (9.6) is worse than the best (9.0) of all but the last: averaging from step 5.
    scripted = iter([10.0, 9.0, 9.5, 9.6, 8.0, 7.0, 8.5, 6.0, 6.0, 6.0])
    seen: list[tuple[bool, dict]] = []

    def evaluate(model_, split, bootstrap_samples=0, streams=0):
        averaged = trainer.optimizer.averaged
        if averaged:  # the trainer must be showing the averages to the evaluation
            assert all(torch.equal(p, trainer.optimizer.state[p]["ax"]) for p in model_.parameters())
        seen.append((averaged, {k: v.detach().clone() for k, v in model_.state_dict().items()}))
        value = next(scripted)
        return {"loss": value, "perplexity": value}

    monkeypatch.setattr(task, "evaluate", evaluate)
    trainer.fit()
    assert trainer.optimizer.param_groups[0]["averaging"]
    assert [a for a, _ in seen[:8]] == [False] * 4 + [True] * 4
    best = seen[7][1]  # step 8 scored 6.0, the best: its (averaged) weights are the saved ones
    saved = load_file(str(run.weights_file))
    for key, value in best.items():
        torch.testing.assert_close(saved[key], value, rtol=0, atol=0)
    trained = load_file(str(run.checkpoint_file))  # the checkpoint keeps the SGD iterate itself
    assert any(not torch.equal(trained[f"model.{k}"], saved[k]) for k in saved)
