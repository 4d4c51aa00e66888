"""Which precision a model runs in: float32, or bfloat16 autocast where the hardware multiplies bf16 natively.

bf16 autocast runs matrix products, convolutions and attention in bfloat16 while the parameters and
the optimizer state stay float32 (no half-precision weights, so no loss scaling is needed: bf16 has
float32's exponent range). Whether it pays depends on the hardware, not on the model:

- a CUDA GPU with bf16 support (Ampere and later) runs it on its tensor cores;
- a CPU with AVX512-BF16 or AMX has instructions for bf16 dot products: its matrix products run about
  2.4 times faster than in float32;
- any other CPU (AVX2 only, say) has no such instructions: torch emulates bf16 there, and a bf16
  matrix product runs tens of times SLOWER than float32 (oneDNN also has no bf16 LSTM for it).

So `train.precision: auto` (the default) chooses bf16 exactly where it is native and float32 elsewhere,
and `bf16` on hardware without it is refused rather than run slowly.

The precision is then a property of the run, not of the machine that reads it: training records the
precision of each leg (a resumed run goes on in its own unless a switch is asked for), and evaluate,
predict, generate and the rest compute in the run's recorded precision (`for_run`), on any machine,
so the same file gives the same numbers as training recorded. `TEXTNN_NATIVE_BF16=1` (or 0) makes the
CPU count as one with (or without) native bf16 whatever it is: the decision, and the tests of both
kinds of machine, can then be run on either (torch emulates bf16 where the CPU lacks it: slowly, but
with the same numbers). What stays float32 under
autocast, by torch's autocast tables or by an explicit `.float()` at the call site: losses
(cross-entropy, MSE), every log-softmax/softmax over a vocabulary or a label set, the CRF's
log-sum-exp (modules/crf.py), the adaptive softmax's cluster log-probabilities, decoding scores and
metrics; layer norm computes its statistics in float32 whatever its input's type.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from textnn.config import PRECISIONS
from textnn.errors import TextnnError


@dataclass(frozen=True)
class Precision:
    """The decision: `dtype` is torch.bfloat16 for bf16 autocast, None for plain float32; `reason` says why."""

    dtype: torch.dtype | None
    reason: str

    @property
    def name(self) -> str:
        return "bf16" if self.dtype == torch.bfloat16 else "fp32"

    def describe(self) -> str:
        """The line a run prints at its start."""
        what = "bf16 autocast (weights and optimizer state in float32)" if self.dtype else "float32"
        return f"precision: {what}: {self.reason}"


# Set to 1 or 0: the CPU counts as one with or without native bf16, whatever it has (see the module's doc).
NATIVE_BF16_VARIABLE = "TEXTNN_NATIVE_BF16"


def cpu_native_bf16() -> bool:
    """Whether this CPU has instructions for bf16 dot products (AVX512-BF16 or AMX tiles), as torch reads
    them (an older torch without one of these probes: that one counts as absent), unless
    TEXTNN_NATIVE_BF16 says otherwise."""
    forced = os.environ.get(NATIVE_BF16_VARIABLE, "").strip()
    if forced:
        if forced not in ("0", "1"):
            raise TextnnError(f"environment variable {NATIVE_BF16_VARIABLE}: got {forced!r}, expected 1 (count this "
                              f"CPU as one with native bf16) or 0 (as one without); unset it to ask the CPU")
        return forced == "1"
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in probes)


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 natively."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_native_bf16()
    return False


def choose(requested: str, device_type: str, native: bool) -> Precision:
    """The precision for a `train.precision` value on a device of `device_type` ('cpu', 'cuda', ...) whose
    bf16 support is `native`. A pure function of its arguments, so the decision is testable anywhere.

    Raises a TextnnError for bf16 where the hardware lacks it."""
    if requested not in PRECISIONS:
        raise TextnnError(f"config key train.precision: got {requested!r}, expected {', '.join(PRECISIONS)}")
    where = "this GPU" if device_type == "cuda" else "this CPU" if device_type == "cpu" else f"device {device_type}"
    hardware = "bf16 support (Ampere or later)" if device_type == "cuda" else "AVX512-BF16 or AMX"
    if requested == "fp32":
        return Precision(None, "train.precision=fp32")
    if native:
        return Precision(torch.bfloat16, f"train.precision={requested}, and {where} multiplies bf16 natively")
    if requested == "bf16":
        raise TextnnError(f"config key train.precision: bf16 asked for, but {where} has no native bf16 "
                          f"({hardware}): emulated bf16 runs many times slower than float32 there; use "
                          f"train.precision=auto or fp32")
    return Precision(None, f"train.precision=auto, and {where} has no native bf16 ({hardware}), where float32 "
                           f"is faster")


def resolve(requested: str, device: torch.device) -> Precision:
    """`choose` for the hardware at hand."""
    return choose(requested, device.type, native_bf16(device))


def named(name: str, reason: str) -> Precision:
    """The precision called `name` ("fp32" or "bf16", as `Precision.name` and run.json write it)."""
    return Precision(torch.bfloat16 if name == "bf16" else None, reason)


def for_run(recorded: str | None, requested: str | None, device: torch.device) -> tuple[Precision, str | None]:
    """The precision a command computes a trained run in, and the one line that says so where it is not
    what this machine would choose by itself (None where it is).

    `recorded`: the precision the run trained in ("fp32" or "bf16"; None for a run that predates the
    record, which then computes in this machine's choice for its train.precision). `requested`: a
    command's --precision (auto, fp32, bf16), which wins over the record; None when not given.
    A run recorded in bf16 computes in bf16 on hardware without it too (emulated: slower, the same numbers).
    """
    default = resolve("auto", device)
    if requested is not None:  # bf16 asked of hardware without it: emulated, as for a run recorded in bf16
        chosen = named("bf16", "--precision bf16") if requested == "bf16" else choose(requested, device.type,
                                                                                     native_bf16(device))
        return chosen, None if chosen.name == default.name else f"precision: {chosen.name}, as --precision asks"
    if recorded not in ("fp32", "bf16"):
        return default, None
    chosen = named(recorded, "the precision the run trained in (run.json)")
    if chosen.name == default.name:
        return chosen, None
    where = "this GPU" if device.type == "cuda" else "this CPU" if device.type == "cpu" else f"device {device.type}"
    if chosen.dtype is None:
        return chosen, (f"precision: fp32, as the run trained (its recorded numbers hold); {where}'s default is "
                        f"bf16, which --precision auto uses")
    return chosen, (f"precision: bf16, as the run trained (its recorded numbers hold); {where} has no native bf16, "
                    f"so it is emulated and slower: --precision fp32 computes in float32 instead")


def for_resumed_leg(recorded: str | None, setting: str, switch_asked: bool, device: torch.device) -> Precision:
    """The precision a resumed run's new leg trains in: the run's own (its last leg's, `recorded`), unless
    train.precision was given on this resume (`switch_asked`), which is then what `setting` decides."""
    if switch_asked or recorded not in ("fp32", "bf16"):
        return resolve(setting, device)
    if recorded == "bf16" and not native_bf16(device):
        where = "this GPU" if device.type == "cuda" else "this CPU" if device.type == "cpu" else device.type
        raise TextnnError(f"the run trained in bf16 and {where} has no native bf16 (emulated bf16 is many times "
                          f"slower): continue it in float32 with train.precision=fp32 (recorded as a switch), or "
                          f"resume it on hardware with bf16")
    return named(recorded, "the run's own, from its earlier training (pass train.precision=... to switch)")


def autocast(precision: Precision, device: torch.device):
    """The context a forward pass runs in: bf16 autocast on `device`, or nothing for float32."""
    if precision.dtype is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=precision.dtype)
