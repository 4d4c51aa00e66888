"""Checks every language model passes, shared by the per-family test files in this folder."""

from __future__ import annotations

from pathlib import Path

import torch

from textnn.training.checkpoint import load_weights, save_weights


def assert_save_load_round_trip(model: torch.nn.Module, other: torch.nn.Module, x: torch.Tensor, folder: Path) -> None:
    """Two differently seeded models in eval mode: after saving `model` and loading it into `other`,
    both give bit-identical logits on `x` (and they did not before)."""
    assert not torch.allclose(model(x).logits, other(x).logits)
    save_weights(model, folder / "model.safetensors")
    load_weights(other, folder / "model.safetensors")
    torch.testing.assert_close(model(x).logits, other(x).logits, rtol=0, atol=0)


def assert_eval_deterministic_and_train_uses_dropout(model: torch.nn.Module, x: torch.Tensor,
                                                    state: object = None) -> None:
    """Two eval-mode passes over `x` (from `state`) agree exactly; two train-mode passes differ."""
    model.eval()
    torch.testing.assert_close(model(x, state).logits, model(x, state).logits, rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model(x, state).logits, model(x, state).logits)


class FullRecomputation:
    """A decoder without a cache, on the protocol of generation/decoding.py: every step reruns the
    model's forward on all tokens so far (on the last `window` of them, when given). Cached decoding
    through the model's `step` and `reorder_state` must give the same outputs."""

    def __init__(self, model: torch.nn.Module, window: int | None = None) -> None:
        self.model, self.window = model, window

    def start(self, batch: object) -> None:
        return None

    def step(self, tokens: torch.Tensor, seen: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        seen = tokens if seen is None else torch.cat([seen, tokens], dim=1)  # [B, all tokens so far]
        window = seen if self.window is None else seen[:, -self.window:]
        return self.model(window).logits[:, -1], seen  # [B, V]

    def reorder(self, seen: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return seen[indices]
