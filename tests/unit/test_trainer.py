"""The trainer, in process: gradient accumulation, the optimizer-step grouping, clipping, guards."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from tests.conftest import write_sentiment_tsv
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.runs import RunDir
from textnn.tasks.classification import ClassificationTask, EncodedTexts
from textnn.training import precision as torch_precision
from textnn.training import trainer as trainer_module
from textnn.training.budget import planned_steps
from textnn.training.checkpoint import read_trainer_state
from textnn.training.trainer import Trainer, TrainingInterrupted, finished_status, is_better


def make_task(root: Path, **train) -> ClassificationTask:
    """Toy sentiment data and Deep CBOW (no dropout, so a forward pass is deterministic in train mode)."""
    raw = {"task": "classification",
           "data": {"train": str(write_sentiment_tsv(root / "train.tsv", 60, seed=1)),
                    "dev": str(write_sentiment_tsv(root / "dev.tsv", 20, seed=2))},
           "model": {"name": "deep_cbow", "preset": "tiny"},
           "train": {"device": "cpu", "progress": False, "bootstrap_samples": 0, **train}}
    return ClassificationTask.from_data(config_from_dict(raw, "test"))


@pytest.fixture
def task(tmp_path) -> ClassificationTask:
    return make_task(tmp_path)


def new_model(task: ClassificationTask, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = task.build_model()
    assert not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())
    return model


def trainer_for(task, model, tmp_path: Path, **train) -> Trainer:
    """A Trainer with the task's train settings, changed by `train` (which must not affect batching)."""
    cfg = replace(task.config.train, **train)
    run = RunDir(tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}")
    run.create(replace(task.config, train=cfg), resume=False)
    return Trainer(task, model, cfg, run)


def first_examples(task: ClassificationTask, n: int) -> EncodedTexts:
    split = task.splits["train"]
    return EncodedTexts(split.records[:n], split.ids[:n], None, split.labels[:n], pad_id=split.pad_id)


def gradients_of_one_step(trainer: Trainer, group: list) -> tuple[float, dict[str, torch.Tensor | None]]:
    """Run `_train_step` with the optimizer's step replaced by a recorder of the gradients it would apply."""
    grads: dict[str, torch.Tensor | None] = {}

    def record(*args, **kwargs):
        for name, p in trainer.model.named_parameters():
            grads[name] = None if p.grad is None else p.grad.detach().clone()

    trainer.optimizer.step = record
    before = copy.deepcopy(trainer.model.state_dict())
    loss = trainer._train_step(group, step=0)
    assert grads, "the optimizer step was never taken"
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no update happened
    assert all(p.grad is None for p in trainer.model.parameters())  # and the gradients were cleared after it
    return loss, grads


def mean_loss_gradients(model: nn.Module, split: EncodedTexts, task: ClassificationTask):
    """Reference: the gradient of the mean cross-entropy over the whole batch, by plain autograd."""
    (batch,) = task.eval_batches(split, batch_size=len(split.ids))
    model.train()
    loss = F.cross_entropy(model(batch.ids, batch.mask).logits, batch.labels)
    loss.backward()
    grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def gradient_tolerance(precision_name: str, reference: torch.Tensor) -> dict:
    """How close the gradient of a step over micro-batches comes to the full batch's, by the precision the
    trainer computes in: float32 adds the same sums in another order; bf16 autocast rounds each micro-batch's
    products to 8 bits of mantissa (2^-8 of the value) before they are added, so an entry may be off by a
    few of those roundings of its own size, or of the tensor's largest where it is a difference of large terms."""
    if precision_name == "fp32":
        return dict(rtol=1e-5, atol=1e-7)
    return dict(rtol=4 * 2 ** -8, atol=2 ** -8 * float(reference.abs().max()))


@pytest.mark.parametrize("micro_batch", [4, 5], ids=["4+4", "5+3"])
@pytest.mark.parametrize("precision_name", ["fp32", "bf16"])
def test_one_step_over_micro_batches_has_the_gradient_of_one_full_batch(task, tmp_path, micro_batch, precision_name,
                                                                         monkeypatch):
    # batch_size=8, grad_accum=1 against batch_size=4 (or 5 + a short last batch of 3), grad_accum=2, and
    # against plain autograd over the whole batch, in the precision the trainer computes in (bf16 emulated
    # where the CPU lacks it).
    task.config.train = replace(task.config.train, precision=precision_name)
    if precision_name == "bf16":  # the trainer takes bf16 on any CPU
        monkeypatch.setattr(torch_precision, "native_bf16", lambda device: True)
    examples = first_examples(task, 8)
    full_group = task.eval_batches(examples, batch_size=8)
    micro_group = task.eval_batches(examples, batch_size=micro_batch)
    assert [b.count for b in full_group] == [8]
    assert [b.count for b in micro_group] == [micro_batch, 8 - micro_batch]

    model = new_model(task)
    full = trainer_for(task, copy.deepcopy(model), tmp_path, batch_size=8, grad_accum=1)
    accumulated = trainer_for(task, copy.deepcopy(model), tmp_path, batch_size=micro_batch, grad_accum=2)
    assert full.precision.name == accumulated.precision.name == precision_name
    full_loss, full_grads = gradients_of_one_step(full, full_group)
    accum_loss, accum_grads = gradients_of_one_step(accumulated, micro_group)
    with full._autocast():
        ref_loss, ref_grads = mean_loss_gradients(copy.deepcopy(model), examples, task)

    assert full_loss == pytest.approx(ref_loss, rel=1e-6)
    assert accum_loss == pytest.approx(ref_loss, rel=1e-6)  # the mean per example over the whole step
    assert set(full_grads) == set(accum_grads) == set(ref_grads)
    trained = [name for name, g in ref_grads.items() if g is not None]
    assert "encoder.embedding.weight" in trained and "head.net.1.weight" in trained
    for name, ref in ref_grads.items():
        if ref is None:  # e.g. the sentence-pair head of a single-sentence task
            assert full_grads[name] is None and accum_grads[name] is None
            continue
        assert ref.abs().sum() > 0, name
        torch.testing.assert_close(full_grads[name], ref, rtol=1e-5, atol=1e-7, msg=name)
        torch.testing.assert_close(accum_grads[name], ref, **gradient_tolerance(precision_name, ref), msg=name)


def test_fit_groups_grad_accum_micro_batches_into_one_optimizer_step(tmp_path):
    task = make_task(tmp_path, batch_size=4, grad_accum=2, max_steps=3, epochs=5)
    trainer = trainer_for(task, new_model(task), tmp_path)
    steps, losses = [], []
    real_step, real_loss = trainer.optimizer.step, task.loss
    trainer.optimizer.step = lambda *a, **k: (steps.append(1), real_step(*a, **k))[1]
    task.loss = lambda model, batch: (losses.append(batch.count), real_loss(model, batch))[1]
    result = trainer.fit()
    assert result.steps == len(steps) == 3 and result.stopped == "max_steps"
    assert len(losses) == 6 and all(n == 4 for n in losses)  # two micro-batches of 4 per step
    steps_per_epoch = -(-len(task.train_batches(0)) // 2)  # ceil(micro-batches / grad_accum)
    assert planned_steps(task, replace(trainer.cfg, max_steps=0)) == 5 * steps_per_epoch
    assert trainer.total_steps == 3  # max_steps comes first
    state = json.loads((trainer.run.path / "run.json").read_text())
    assert state["status"] == "running"  # finished once experiment.train has written the report too


def test_clip_norm_bounds_the_applied_gradient(task, tmp_path):
    examples = first_examples(task, 8)
    group = task.eval_batches(examples, batch_size=8)
    _, unclipped = gradients_of_one_step(trainer_for(task, new_model(task), tmp_path), group)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in unclipped.values()
                                                 if g is not None]))
    limit = float(norm) / 10
    _, clipped = gradients_of_one_step(trainer_for(task, new_model(task), tmp_path, clip_norm=limit), group)
    clipped_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped.values()
                                                         if g is not None]))
    assert float(clipped_norm) == pytest.approx(limit, rel=1e-4)
    for name, g in unclipped.items():  # same direction, scaled down
        if g is not None:
            torch.testing.assert_close(clipped[name], g * (limit / float(norm)), rtol=1e-4, atol=1e-8)


def test_the_learning_rate_reaches_the_optimizer_before_the_step(task, tmp_path):
    trainer = trainer_for(task, new_model(task), tmp_path, lr=0.25, scheduler="linear", warmup_steps=4)
    seen = []
    trainer.optimizer.step = lambda *a, **k: seen.append(trainer.optimizer.param_groups[0]["lr"])
    group = task.eval_batches(first_examples(task, 4), batch_size=4)
    for step in range(2):
        trainer._train_step(group, step=step)
    assert seen == pytest.approx([0.25 * 1 / 4, 0.25 * 2 / 4])  # linear warmup: (step + 1) / warmup


def poison_losses(task, bad: Callable[[int], bool]) -> None:
    """Make the loss of the k-th call (0-based; one call per step with grad_accum 1) NaN where bad(k)."""
    real_loss, calls = task.loss, []

    def loss(model, batch):
        calls.append(1)
        value = real_loss(model, batch)
        return value * float("nan") if bad(len(calls) - 1) else value

    task.loss = loss


def optimizer_state(trainer: Trainer) -> list[dict]:
    return [{k: v.clone() if torch.is_tensor(v) else v for k, v in trainer.optimizer.state[p].items()}
            for p in trainer.model.parameters()]


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b) if torch.is_tensor(a) else a == b


def test_a_step_with_a_non_finite_loss_changes_no_weight_and_no_optimizer_state(task, tmp_path):
    trainer = trainer_for(task, new_model(task), tmp_path, optimizer="adam", weight_decay=0.1)
    poison_losses(task, lambda k: k == 1)
    batches = task.train_batches(0)
    trainer._train_step([batches[0]], step=0)  # a good step: Adam now has moments and a step count
    weights, moments = copy.deepcopy(trainer.model.state_dict()), optimizer_state(trainer)
    loss = trainer._train_step([batches[1]], step=1)
    assert math.isnan(loss)
    assert same(trainer.model.state_dict(), weights) and same(optimizer_state(trainer), moments)
    assert all(p.grad is None for p in trainer.model.parameters())
    trainer._train_step([batches[0]], step=2)  # and the next good step trains again
    assert not same(trainer.model.state_dict(), weights)


def test_skipped_steps_are_counted_and_reported_and_training_goes_on(task, tmp_path, capsys):
    trainer = trainer_for(task, new_model(task), tmp_path, max_steps=6, epochs=5, log_every=1)
    poison_losses(task, lambda k: k in (2, 3))
    result = trainer.fit()
    assert result.steps == 6 and result.skipped_steps == 2 and result.stopped == "max_steps"
    records = trainer.run.read_metrics()
    assert [r["step"] for r in records if r["split"] == "skipped"] == [3, 4]
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 5, 6]
    assert finished_status(result)["skipped_steps"] == 2  # what run.json records once the run is finished
    err = capsys.readouterr().err
    assert "step 3: training loss is nan; update skipped (1 in a row, 1 in all)" in err
    assert "step 4: training loss is nan; update skipped (2 in a row, 2 in all)" in err


def test_train_records_say_how_much_of_their_seconds_went_to_evaluations(task, tmp_path, monkeypatch):
    """On a clock that a training step moves by 1 and a dev evaluation by 100, each train record's
    `seconds` counts both and its `eval_seconds` the evaluations before it, so their difference is the
    step count; the checkpoint keeps the total, the last evaluation included."""
    clock = [0.0]
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    trainer = trainer_for(task, new_model(task), tmp_path, max_steps=6, eval_every=2, epochs=5, log_every=1)
    real_step, real_evaluate = trainer._train_step, task.evaluate

    def step(*args, **kwargs):
        clock[0] += 1.0
        return real_step(*args, **kwargs)

    def evaluate(*args, **kwargs):
        clock[0] += 100.0
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(trainer, "_train_step", step)
    monkeypatch.setattr(task, "evaluate", evaluate)
    trainer.fit()
    rows = [r for r in trainer.run.read_metrics() if r["split"] == "train"]
    assert [(r["step"], r["seconds"], r["eval_seconds"]) for r in rows] == [
        (1, 1.0, 0.0), (2, 2.0, 0.0), (3, 103.0, 100.0), (4, 104.0, 100.0), (5, 205.0, 200.0), (6, 206.0, 200.0)]
    assert read_trainer_state(trainer.run.checkpoint_file)["eval_seconds"] == 300.0


def test_training_stops_after_max_bad_steps_in_a_row_and_keeps_the_last_good_weights(task, tmp_path):
    trainer = trainer_for(task, new_model(task), tmp_path, epochs=5, checkpoint_every=1, max_bad_steps=3)
    poison_losses(task, lambda k: k >= 2)
    real_step, good = trainer._train_step, {}

    def step(group, step, epoch=0):
        loss = real_step(group, step, epoch)
        if math.isfinite(loss):
            good.update(step=step + 1, weights=copy.deepcopy(trainer.model.state_dict()))
        return loss

    trainer._train_step = step
    with pytest.raises(TextnnError, match=r"loss was nan in 3 steps in a row \(steps 3-5\).*lower train\.lr"):
        trainer.fit()
    assert good["step"] == 2
    saved = load_file(str(trainer.run.checkpoint_file))
    for name, value in good["weights"].items():
        assert torch.equal(saved[f"model.{name}"], value), name
        assert torch.isfinite(value).all()


@pytest.mark.parametrize("scores,best_step", [([float("nan"), 0.6, float("nan"), 0.5], 2),
                                              ([float("nan")] * 4, None)])
def test_a_nan_dev_score_is_never_the_best(task, tmp_path, scores, best_step):
    trainer = trainer_for(task, new_model(task), tmp_path, max_steps=4, eval_every=1, epochs=5)
    scripted, seen = iter(scores + [0.1]), []  # the last: the final pass over dev when nothing was best

    def evaluate(model, split, bootstrap_samples=0):
        seen.append(copy.deepcopy(model.state_dict()))
        return {"loss": 1.0, "accuracy": next(scripted)}

    task.evaluate = evaluate
    result = trainer.fit()
    assert result.best_step == best_step
    assert result.best_metric == (None if best_step is None else 0.6)
    assert not is_better(float("nan"), None, True) and not is_better(float("nan"), 9.0, False)
    # the saved weights: those evaluated at the best step, or the last ones when no score was a number
    expected = seen[(best_step or 4) - 1]
    saved = load_file(str(trainer.run.weights_file))
    assert all(torch.equal(saved[k], expected[k]) for k in expected)
    assert not all(torch.equal(seen[0][k], expected[k]) for k in expected)  # the steps did train


def test_trainer_refuses_an_empty_training_set(task, tmp_path):
    task.splits["train"] = replace(task.splits["train"], records=[], ids=[], labels=[])
    with pytest.raises(TextnnError, match="no batches"):
        trainer_for(task, new_model(task), tmp_path)


@pytest.mark.parametrize("native", [True, False], ids=["cpu-with-bf16", "cpu-without-bf16"])
@pytest.mark.parametrize("bootstrap", [0, 50])
def test_the_best_weights_are_evaluated_on_dev_once_unless_a_bootstrap_is_asked_for(tmp_path, bootstrap, monkeypatch,
                                                                                    native):
    """With no bootstrap, the final dev numbers are those recorded when the best weights were selected
    (evaluation is deterministic, so a second pass over dev would only cost time); a bootstrap CI needs
    the extra pass. Either way the final dev metrics equal a fresh evaluation of the saved weights in the
    precision the run trained in (train.precision auto: bf16 on a CPU with it, emulated here if need be)."""
    monkeypatch.setattr(torch_precision, "native_bf16", lambda device: native)
    task = make_task(tmp_path, max_steps=4, eval_every=2, epochs=5, bootstrap_samples=bootstrap)
    trainer = trainer_for(task, new_model(task), tmp_path)
    calls, real_evaluate = [], task.evaluate
    task.evaluate = lambda model, split, bootstrap_samples=0: (calls.append(split), real_evaluate(
        model, split, bootstrap_samples=bootstrap_samples))[1]
    result = trainer.fit()
    assert calls.count("dev") == 2 + (1 if bootstrap else 0)  # steps 2 and 4, then the final pass if needed
    calls.clear()
    monkeypatch.setattr(type(task), "intervals", False)  # an evaluation without intervals: no final pass
    trainer_for(task, new_model(task), tmp_path).fit()
    assert calls.count("dev") == 2
    with trainer._autocast():  # in the precision the run trained and selected in
        fresh = real_evaluate(trainer.model.eval(), "dev")
    assert result.dev["accuracy"] == fresh["accuracy"] and result.dev["loss"] == pytest.approx(fresh["loss"])


def test_ctrl_c_during_an_evaluation_stops_it_at_the_next_batch_and_the_resumed_run_makes_it(tmp_path):
    """The dev set takes 5 batches; Ctrl-C arrives while the 2nd is evaluated (step 3's evaluation).
    The run saves a checkpoint and stops before the 3rd batch, records no result for the cut-short
    evaluation, and the resumed run evaluates step 3 first: it ends exactly as an uninterrupted run."""
    root = tmp_path / "data"
    root.mkdir()
    raw = {"task": "classification",
           "data": {"train": str(write_sentiment_tsv(root / "train.tsv", 60, seed=1)),
                    "dev": str(write_sentiment_tsv(root / "dev.tsv", 300, seed=2))},
           "model": {"name": "dan", "preset": "tiny"},  # dropout: the RNG state must come back too
           "train": {"device": "cpu", "progress": False, "bootstrap_samples": 0, "batch_size": 8,
                     "eval_every": 3, "max_steps": 7, "epochs": 5}}
    task = ClassificationTask.from_data(config_from_dict(raw, "test"))
    assert len(task.eval_batches(task.splits["dev"])) == 5

    def run_to_the_end(name: str, interrupt_at_batch: int = 0) -> tuple[RunDir, list[int]]:
        torch.manual_seed(0)
        run = RunDir(tmp_path / name)
        run.create(task.config, resume=False)
        trainer = Trainer(task, task.build_model(), task.config.train, run)
        evaluated = []  # batches of each evaluation that were run

        def count(module, args, output):
            if not module.training:
                evaluated.append(1)
                if len(evaluated) == interrupt_at_batch:
                    os.kill(os.getpid(), signal.SIGINT)  # the trainer's own handler takes it

        hook = trainer.model.register_forward_hook(count)
        if interrupt_at_batch:
            with pytest.raises(TrainingInterrupted):
                trainer.fit()
            assert len(evaluated) == interrupt_at_batch  # no batch of the evaluation after Ctrl-C
            assert run.status()["status"] == "interrupted"
            assert not any(r["split"] == "dev" for r in run.read_metrics())  # no partial result
            assert read_trainer_state(run.checkpoint_file)["pending_evaluation"]
            hook.remove()
            torch.manual_seed(1)  # the checkpoint, not this, decides what comes next
            trainer = Trainer(task, task.build_model(), task.config.train, run)
            trainer.fit(resume=True)
        else:
            trainer.fit()
        return run, evaluated

    reference, _ = run_to_the_end("reference")
    resumed, _ = run_to_the_end("interrupted", interrupt_at_batch=2)
    expected, got = load_file(str(reference.checkpoint_file)), load_file(str(resumed.checkpoint_file))
    for key in [k for k in expected if k.startswith(("model.", "optim."))]:
        assert torch.equal(expected[key], got[key]), key

    def dev(run: RunDir) -> list[tuple]:
        return [(r["step"], r["accuracy"], r["loss"]) for r in run.read_metrics() if r["split"] == "dev"]

    assert dev(resumed) == dev(reference) and [step for step, *_ in dev(reference)] == [3, 6, 7]


def test_a_ctrl_c_that_arrives_while_processes_agree_is_acted_on_at_the_next_step(tmp_path, monkeypatch):
    """Under torchrun every step ends with the processes agreeing whether anyone saw a Ctrl-C. A
    signal handled during that exchange (after the flags were sent, before the answer came back)
    must stop training one step later, not be overwritten by the answer and lost."""
    task = make_task(tmp_path, batch_size=8)  # 8 steps an epoch: no evaluation before step 8
    trainer = trainer_for(task, new_model(task), tmp_path, max_steps=6)
    agreements = []

    def any_process(*flags):  # a second process that never saw a Ctrl-C
        agreements.append(flags[0])
        if len(agreements) == 2:
            trainer.session.on_signal(signal.SIGINT, None)  # handled while the others answer
        return flags

    monkeypatch.setattr("textnn.training.distributed.world", lambda: 2)
    monkeypatch.setattr("textnn.training.distributed.any_process", any_process)
    with pytest.raises(TrainingInterrupted):
        trainer.fit()
    assert agreements == [False, False, True]
    assert read_trainer_state(trainer.run.checkpoint_file)["step"] == 3


def test_a_process_failing_under_torchrun_ignores_sigterm_until_its_error_is_out(tmp_path, monkeypatch):
    """When one torchrun process dies, the others fail in their next collective while torchrun sends
    them SIGTERM: a failing process must outlive that signal to print its one-line error, where a
    single process gets its own handlers back."""
    task = make_task(tmp_path, batch_size=8)
    for world, expected in ((2, signal.SIG_IGN), (1, signal.SIG_DFL)):
        trainer = trainer_for(task, new_model(task), tmp_path / f"world{world}", max_steps=6)

        def lost_peer(*args):
            raise RuntimeError("[gloo] Connection closed by peer")

        monkeypatch.setattr("textnn.training.distributed.world", lambda: world)
        monkeypatch.setattr(trainer, "_train_step", lost_peer)  # the step's all-reduce meets the lost peer
        before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            with pytest.raises(RuntimeError, match="Connection closed"):
                trainer.fit()
            assert signal.getsignal(signal.SIGTERM) == expected, world
        finally:
            signal.signal(signal.SIGTERM, before)
