"""Checks every language model passes, shared by the per-family test files in this folder.

Every family is built the way the language-modelling task builds it: the registered encoder on its
tiny preset with an `LMHead` on top (`tasks.language_modeling.language_model`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from textnn import registry
from textnn.tasks.language_modeling import LanguageModel, language_model
from textnn.training.checkpoint import load_weights, save_weights


def build_lm(name: str, overrides: dict | None, vocab_size: int, seed: int = 0, pad_id: int = 0) -> LanguageModel:
    """Family `name` on its tiny preset with `overrides`, through the registry: encoder + LMHead."""
    encoder_cls = registry.encoder_class(name)
    torch.manual_seed(seed)
    cfg = encoder_cls.presets["tiny"].options(**(overrides or {}))
    return language_model(name, cfg, vocab_size, pad_id)


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


def assert_reordered_state_continues_like_reordered_prompts(model: LanguageModel, prompts: torch.Tensor,
                                                            more: torch.Tensor, indices: torch.Tensor) -> None:
    """Beam search's contract: decode `prompts` [B, T], keep the rows `indices` [B'] of the state with
    `reorder`, continue with `more` [B', K] one token at a time; every step's logits equal those
    of decoding prompts[indices] from scratch and continuing the same way. As a control, continuing
    from the state as it was (not reordered) gives other logits in the rows that moved."""
    model.eval()
    with torch.no_grad():
        _, state = model.step(prompts, None)
        kept = model.reorder(state, indices)
        _, fresh = model.step(prompts[indices], None)
        for t in range(more.size(1)):
            logits, kept = model.step(more[:, t:t + 1], kept)  # [B', V]
            expected, fresh = model.step(more[:, t:t + 1], fresh)
            torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
        if len(indices) == len(prompts):  # the control
            moved = indices != torch.arange(len(indices))  # rows whose state came from another row
            assert moved.any()
            unordered, _ = model.step(more[:, :1], state)
            first, _ = model.step(more[:, :1], model.reorder(state, indices))
            assert not torch.allclose(unordered[moved], first[moved], atol=1e-4)


class FullRecomputation:
    """A decoder without a cache, on the protocol of generation/decoding.py: every step reruns the
    model's forward on all tokens so far (on the last `window` of them, when given). Cached decoding
    through the model's `step` and `reorder` must give the same outputs."""

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
