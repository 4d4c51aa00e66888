"""Precision: the decision (bf16 autocast only where the hardware multiplies bf16 natively), the float32
islands under autocast, and training and the run commands computing in the precision the run asks for.

The decision is tested as a function of (setting, device type, native support), never of the machine
the tests run on; where a test needs bf16 to be "native", it says so by patching `native_bf16` (in this
process) or by TEXTNN_NATIVE_BF16 (for the commands it starts).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import write_sentiment_tsv
from textnn import experiment, front
from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, beam_search, greedy
from textnn.modules.crf import LinearChainCRF
from textnn.modules.heads import AdaptiveLMHead, LMHead, TaggerHead
from textnn.resolve import config_from_dict
from textnn.tasks.classification import ClassificationTask
from textnn.training import precision
from textnn.training.precision import Precision, choose


# --- the decision ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_is_bf16_exactly_where_it_is_native(device):
    assert choose("auto", device, native=True).dtype == torch.bfloat16
    assert choose("auto", device, native=False).dtype is None
    assert "no native bf16" in choose("auto", device, native=False).reason


@pytest.mark.parametrize("native", [True, False])
def test_fp32_is_always_fp32(native):
    assert choose("fp32", "cpu", native).dtype is None and choose("fp32", "cuda", native).dtype is None


def test_bf16_is_refused_with_one_line_where_the_hardware_lacks_it():
    assert choose("bf16", "cpu", native=True).dtype == torch.bfloat16
    with pytest.raises(TextnnError, match="AVX512-BF16 or AMX") as err:
        choose("bf16", "cpu", native=False)
    assert "\n" not in str(err.value) and "train.precision=auto or fp32" in str(err.value)
    with pytest.raises(TextnnError, match="Ampere"):
        choose("bf16", "cuda", native=False)


@pytest.mark.parametrize("native", [True, False])
def test_a_run_computes_in_the_precision_it_trained_in_on_any_machine(monkeypatch, native):
    monkeypatch.setattr(precision, "native_bf16", lambda device: native)
    cpu = torch.device("cpu")
    default = "bf16" if native else "fp32"
    for recorded in ("fp32", "bf16"):
        chosen, note = precision.for_run(recorded, None, cpu)
        assert chosen.name == recorded  # never the machine's choice
        assert (note is None) == (recorded == default)  # one line where the machine would choose otherwise
        if note:
            assert note.startswith(f"precision: {recorded}, as the run trained") and "--precision" in note
    # a run that recorded nothing: the machine's choice, as before the record
    assert precision.for_run(None, None, cpu) == (precision.resolve("auto", cpu), None)
    # --precision wins over the record, and says so where it is not the machine's choice
    assert precision.for_run("bf16", "fp32", cpu)[0].name == "fp32"
    assert precision.for_run("fp32", "auto", cpu) == (precision.resolve("auto", cpu), None)
    assert precision.for_run("fp32", "bf16", cpu)[0].name == "bf16"  # emulated where bf16 is not native


@pytest.mark.parametrize("setting,native", [("1", True), ("0", False)])
def test_the_hardware_decision_can_be_forced_either_way(monkeypatch, setting, native):
    monkeypatch.setenv(precision.NATIVE_BF16_VARIABLE, setting)
    assert precision.cpu_native_bf16() is native
    assert precision.resolve("auto", torch.device("cpu")).name == ("bf16" if native else "fp32")
    monkeypatch.setenv(precision.NATIVE_BF16_VARIABLE, "yes")
    with pytest.raises(TextnnError, match="TEXTNN_NATIVE_BF16: got 'yes', expected 1"):
        precision.cpu_native_bf16()


@pytest.mark.parametrize("native", [True, False])
def test_a_resumed_leg_keeps_the_runs_precision_unless_a_switch_is_asked_for(monkeypatch, native):
    monkeypatch.setattr(precision, "native_bf16", lambda device: native)
    cpu = torch.device("cpu")
    assert precision.for_resumed_leg("fp32", "auto", False, cpu).name == "fp32"
    assert precision.for_resumed_leg(None, "auto", False, cpu).name == ("bf16" if native else "fp32")
    assert precision.for_resumed_leg("fp32", "fp32", True, cpu).name == "fp32"
    if native:
        assert precision.for_resumed_leg("bf16", "auto", False, cpu).name == "bf16"
        assert precision.for_resumed_leg("fp32", "bf16", True, cpu).name == "bf16"
    else:
        with pytest.raises(TextnnError, match="train.precision=fp32"):
            precision.for_resumed_leg("bf16", "auto", False, cpu)
        assert precision.for_resumed_leg("bf16", "fp32", True, cpu).name == "fp32"


def test_the_start_line_names_the_precision_and_why():
    assert choose("auto", "cpu", True).describe().startswith("precision: bf16 autocast")
    assert "float32" in choose("auto", "cpu", False).describe() and "AVX512-BF16" in choose("auto", "cpu", False).describe()


# --- the config -------------------------------------------------------------------------------------
def _raw(**train) -> dict:
    return {"task": "classification", "data": {"train": "t.tsv"}, "model": {"name": "cnn", "preset": "tiny"},
            "train": train}


def test_precision_values_are_checked_and_old_amp_is_read_as_precision():
    assert config_from_dict(_raw(), "c").train.precision == "auto"
    assert config_from_dict(_raw(precision="bf16"), "c").train.precision == "bf16"
    with pytest.raises(TextnnError, match="train.precision"):
        config_from_dict(_raw(precision="half"), "c")
    # Runs written before train.precision hold `amp`: true meant bf16 where supported, false float32.
    assert config_from_dict(_raw(amp=False), "c").train.precision == "fp32"
    assert config_from_dict(_raw(amp=True), "c").train.precision == "auto"
    assert config_from_dict(_raw(amp=False, precision="auto"), "c").train.precision == "auto"


def _sentiment_config(root: Path, model: str = "cnn", **train):
    raw = {"task": "classification",
           "data": {"train": str(write_sentiment_tsv(root / "train.tsv", 64, seed=1)),
                    "dev": str(write_sentiment_tsv(root / "dev.tsv", 16, seed=2)),
                    "tokenizer": "wordpiece" if model == "bert" else "word"},
           "model": {"name": model, "preset": "tiny"},
           "train": {"device": "cpu", "progress": False, "bootstrap_samples": 0, "epochs": 1, "batch_size": 16,
                     "threads": 1, **train}}
    return config_from_dict(raw, "precision-test")


def test_bf16_training_without_native_bf16_is_refused_before_a_run_directory_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    run_dir = tmp_path / "run"
    with pytest.raises(TextnnError, match="no native bf16"):
        experiment.train(_sentiment_config(tmp_path, precision="bf16"), run_dir)
    assert not run_dir.exists()


# --- the float32 islands ----------------------------------------------------------------------------
def _bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_losses_stay_float32_under_bf16_autocast():
    torch.manual_seed(0)
    states = torch.randn(6, 16)
    targets = torch.randint(0, 50, (6,))
    with _bf16():
        assert LMHead(16, 50)(states).dtype == torch.bfloat16  # autocast is in force on the projection
        assert LMHead(16, 50).nll(states, targets).dtype == torch.float32
        adaptive = AdaptiveLMHead(16, 50, cutoffs=[10, 30])
        assert adaptive.nll(states, targets).dtype == torch.float32
        log_probs = adaptive(states)
        assert log_probs.dtype == torch.float32
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(6), atol=1e-4)


@pytest.mark.parametrize("output", ["crf", "softmax"])
def test_the_taggers_likelihood_and_viterbi_compute_in_float32(output):
    torch.manual_seed(0)
    head = TaggerHead(8, ["O", "B-PER", "I-PER"], "bio", output=output)
    states, mask = torch.randn(2, 5, 8), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    tags = torch.randint(0, 3, (2, 5))
    with _bf16():
        emissions = head(states)
        assert emissions.dtype == torch.bfloat16
        nll = head.nll(emissions, tags, mask)
        assert nll.dtype == torch.float32
        best = head.decode(emissions, mask)
    # The same numbers as float32 emissions holding the bf16 values: the CRF's sums lost nothing more.
    expected = head.nll(emissions.float(), tags, mask)
    assert torch.allclose(nll, expected, atol=1e-5)
    assert torch.equal(best, head.decode(emissions.float(), mask))


def test_crf_log_partition_is_float32_for_bf16_emissions():
    crf = LinearChainCRF(4)
    emissions = torch.randn(3, 6, 4).to(torch.bfloat16)
    mask = torch.ones(3, 6, dtype=torch.bool)
    assert crf.log_partition(emissions, mask).dtype == torch.float32


class _BF16Decoder:
    """A fake decoder whose logits come out in bf16, as a model under autocast gives them."""

    def start(self, batch):
        return batch

    def step(self, tokens, state):
        rows = state.size(0)
        base = torch.linspace(0, 1, 7).repeat(rows, 1) * (1 + tokens[:, -1:].float())  # [B, V]
        return base.to(torch.bfloat16), state

    def reorder(self, state, indices):
        return state[indices]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_scores_are_float32_for_bf16_logits(search):
    """The searches take the log-softmax of the bf16 logits in float32: the best output's score is the
    float32 sum, not a sum of bf16-rounded terms (bf16 steps by 2^-8 of the value: ~0.008 here)."""
    prefix = torch.ones(2, 1, dtype=torch.long)
    cfg = DecodingConfig(method=search, beam_size=3, max_tokens=4) if search == "beam" else DecodingConfig(max_tokens=4)
    found = (beam_search if search == "beam" else greedy)(_BF16Decoder(), torch.zeros(2, 1), prefix, cfg)
    best = found[0][0]
    assert best.tokens == [6, 6, 6, 6]  # the last token scores highest at every step
    expected = sum(float(torch.log_softmax((torch.linspace(0, 1, 7) * scale).to(torch.bfloat16).float(), -1)[6])
                   for scale in (2, 7, 7, 7))
    assert best.log_prob == pytest.approx(expected, abs=1e-5)


# --- a tiny model's bf16 loss beside its float32 loss -----------------------------------------------
@pytest.mark.parametrize("model", ["cnn", "deep_cbow", "bert"])
def test_a_tiny_models_bf16_loss_is_finite_and_close_to_float32(tmp_path, model):
    task = ClassificationTask.from_data(_sentiment_config(tmp_path, model))
    torch.manual_seed(0)
    net = task.build_model().eval()
    batch = task.train_batches(0)[0]
    with torch.no_grad():
        fp32 = float(task.loss(net, batch))
        with _bf16():
            bf16 = task.loss(net, batch)
    assert bf16.dtype == torch.float32 and torch.isfinite(bf16)
    assert abs(float(bf16) - fp32) <= 0.02 * abs(fp32) + 1e-3


# --- training, evaluate and predict compute in the run's precision ------------------------------------
def test_training_evaluate_and_predict_run_in_the_runs_precision(tmp_path, monkeypatch):
    """With bf16 'native' (patched), a run set to auto trains under bf16 autocast and says so, and
    evaluate and predict read it back under bf16 autocast; set to fp32, neither does."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    seen: list[bool] = []

    def record(module, args):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        for setting, expected in (("auto", True), ("fp32", False)):
            seen.clear()
            run, result = experiment.train(_sentiment_config(tmp_path, precision=setting), tmp_path / setting)
            assert result.precision == ("bf16" if expected else "fp32")
            assert seen and all(flag == expected for flag in seen)
            seen.clear()
            front.evaluate_run(run.path, str(tmp_path / "dev.tsv"), bootstrap_samples=0)
            assert seen and all(flag == expected for flag in seen)
            seen.clear()
            lines = list(front.predict_run(run.path, ["good great film", "awful dull plot"]))
            assert len(lines) == 2 and seen and all(flag == expected for flag in seen)
            # between two predictions the caller is back in float32
            assert not torch.is_autocast_enabled("cpu")
    finally:
        handle.remove()
