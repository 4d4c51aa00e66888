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
and `bf16` on hardware without it is refused rather than run slowly. What stays float32 under
autocast, by torch's autocast tables or by an explicit `.float()` at the call site: losses
(cross-entropy, MSE), every log-softmax/softmax over a vocabulary or a label set, the CRF's
log-sum-exp (modules/crf.py), the adaptive softmax's cluster log-probabilities, decoding scores and
metrics; layer norm computes its statistics in float32 whatever its input's type.
"""

from __future__ import annotations

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


def cpu_native_bf16() -> bool:
    """Whether this CPU has instructions for bf16 dot products (AVX512-BF16 or AMX tiles), as torch reads
    them (an older torch without one of these probes: that one counts as absent)."""
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


def for_inference(requested: str, device: torch.device) -> Precision:
    """The precision evaluate, predict and generate run a trained model in: the run's own setting, except
    that a run trained in bf16 elsewhere runs in float32 on hardware without native bf16 (it reads the
    same weights; refusing would only strand the run)."""
    native = native_bf16(device)
    return choose("auto" if requested == "bf16" and not native else requested, device.type, native)


def autocast(precision: Precision, device: torch.device):
    """The context a forward pass runs in: bf16 autocast on `device`, or nothing for float32."""
    if precision.dtype is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=precision.dtype)
