"""Feature-based use of a pre-trained encoder: its layers, frozen, as extra input to another model.

Devlin et al. 2019 §5.3 / Table 7 compare fine-tuning BERT on CoNLL NER with feeding its frozen
activations to a BiLSTM tagger: the last hidden layer, the sum or the concatenation of the last four,
and others; ELMo (Peters et al. 2018) feeds a learned scalar mix of all layers. `data.features_from`
names a run (a `pretraining` run, say) or a Hugging Face directory of a BERT-family encoder, or an
ELMo language-model run; `data.features_layers` picks last, sum4, cat4 or mix (modules/scalar_mix.py).
A BERT-family word is read from its first WordPiece piece, as in fine-tuning. ELMo reads whole words
(each word's bytes; `FeatureSource.word_level`), so its layers are per word already: the token layer
and each biLSTM layer, each [forward; backward] (Peters et al. 2018 §3.2).

`data.features_dropout` drops out the combined features (Peters et al. §3.3: "a moderate amount of
dropout to ELMo"), `data.features_layer_norm` normalises each layer before the scalar mix (§3.2).
`mix_weights(run)` reads a trained mix's softmax-normalised weights and gamma back from the run (to
print or plot which layers a task chose).

The frozen encoder is part of the model (`frozen.*` in model.safetensors), so the run keeps working
without the directory it came from; its settings, tokenizer and vocabulary are saved beside it
(features.json, features_tokenizer.json, features_vocab.json). Only the scalar mix, when chosen, is
trained; the encoder stays in eval mode (no dropout) and runs without gradients.
"""

# B batch, P pieces, T words, D encoder width, E feature size, L layers

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from textnn import registry, transfer
from textnn.config import WordVectorData, build_dataclass, check_key, opt
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.models.base import InputSpec
from textnn.modules.dropout import Dropout
from textnn.modules.scalar_mix import LAYER_COMBINATIONS, ScalarMix, combine_layers, combined_size


@dataclass
class FeatureSource:
    """What builds the frozen encoder: its family and settings, its text pipeline, and (when read from
    the source directory) its weights."""

    model_name: str
    model: object  # the family's Config dataclass
    tokenizer: Tokenizer
    vocab: Vocab
    state: dict[str, torch.Tensor] | None = None  # encoder.* weights; None when rebuilt from a run

    @property
    def word_level(self) -> bool:
        """The encoder reads whole words (their bytes: ELMo), not sub-word pieces."""
        return "word_bytes" in registry.encoder_class(self.model_name).reads

    def encode_words(self, words: list[str]) -> np.ndarray:
        """A word-level encoder's input for one sentence: [T, C] (its `encode_words`)."""
        return registry.encoder_class(self.model_name).encode_words(self.model, words)


def pad_word_inputs(arrays: list[np.ndarray], length: int) -> torch.Tensor:
    """Word-level inputs of a batch, [T_i, C_i] each, zero-padded to [B, length, max C_i] (long)."""
    width = max(a.shape[1] for a in arrays)
    out = np.zeros((len(arrays), length, width), dtype=np.int64)  # [B, T, C]
    for row, a in enumerate(arrays):
        out[row, :a.shape[0], :a.shape[1]] = a
    return torch.from_numpy(out)


def read_source(path: str) -> FeatureSource:
    """The encoder in `path`: a textnn run or a Hugging Face checkpoint directory of the BERT family."""
    start = transfer.open_start(path, "config", "data.features_from")  # a BERT-family or ELMo run, or a BERT checkpoint
    section = dict(start.config.get("model") or {})
    name = str(section.pop("name", ""))
    for key in ("preset", "init_from"):
        section.pop(key, None)
    encoder_cls = registry.encoder_class(name)
    if not encoder_cls.gives_layers:
        raise TextnnError(f"data.features_from={path}: its encoder ({name}) does not give its layers; give a run or "
                          f"checkpoint of the BERT family, or an ELMo run")
    model = build_dataclass(encoder_cls.config_class, section, "model", f"{path} (data.features_from)")
    tokenizer, vocab = start.pipeline
    state = {k: v for k, v in start.weights.items() if k.startswith("encoder.")}
    return FeatureSource(name, model, tokenizer, vocab, state)


def save_source(source: FeatureSource, run_path: Path) -> None:
    settings = {"name": source.model_name, **dataclasses.asdict(source.model)}
    (run_path / "features.json").write_text(json.dumps({"model": settings}), encoding="utf-8")
    (run_path / "features_tokenizer.json").write_text(json.dumps(source.tokenizer.to_dict()), encoding="utf-8")
    source.vocab.save(run_path / "features_vocab.json")


def source_from_run(run_path: Path) -> FeatureSource:
    """The FeatureSource a run saved (weights come with the run's model.safetensors)."""
    from textnn.tasks.base import Task

    settings = dict(Task.read_json(run_path / "features.json")["model"])
    name = settings.pop("name")
    model = build_dataclass(registry.encoder_class(name).config_class, settings, "model", str(run_path / "features.json"))
    tokenizer = Tokenizer.from_dict(Task.read_json(run_path / "features_tokenizer.json"))
    return FeatureSource(name, model, tokenizer, Vocab.load(run_path / "features_vocab.json"))


class FrozenLayers(nn.Module):
    """A frozen encoder whose layers (a sub-word encoder's read at each word's first piece) combine into
    per-word features, with dropout on the result."""

    def __init__(self, source: FeatureSource, how: str, dropout: float = 0.0, layer_norm: bool = False) -> None:
        super().__init__()
        self.encoder = registry.encoder_class(source.model_name)(
            source.model, InputSpec(vocab_size=len(source.vocab), pad_id=source.vocab.pad_id))
        if source.state is not None:
            missing = [k for k in self.encoder.state_dict() if f"encoder.{k}" not in source.state]
            missing = [k for k in missing if not k.startswith("pooler")]  # the pooler is not a layer
            if missing:
                raise TextnnError(f"data.features_from: the checkpoint lacks {', '.join(missing[:4])}; it does not "
                                  f"hold a whole encoder")
            self.encoder.load_state_dict({k[len("encoder."):]: v for k, v in source.state.items()}, strict=False)
        self.encoder.requires_grad_(False)
        self.how = how
        self.word_level = source.word_level
        # ELMo: the token layer and each LSTM layer; BERT: each block's output
        layers = source.model.num_layers + 1 if self.word_level else len(self.encoder.blocks)
        self.mix = ScalarMix(layers, layer_norm) if how == "mix" else None
        self.dropout = Dropout(dropout)
        self.size = combined_size(how, self.encoder.token_size, layers)

    def train(self, mode: bool = True) -> "FrozenLayers":
        super().train(mode)
        self.encoder.eval()  # frozen features: never dropout
        return self

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, first: torch.Tensor | None = None) -> torch.Tensor:
        """Sub-word encoders: ids, mask [B, P] ([CLS] pieces [SEP]), first [B, T]; word-level ones: ids
        [B, T, C] (each word's input, `FeatureSource.encode_words`), mask [B, T]. -> features [B, T, E]."""
        with torch.no_grad():
            if self.word_level:
                words = self.encoder.hidden_layers(ids, mask)  # L x [B, T, D]
            else:
                layers = self.encoder.hidden_layers(ids, mask, torch.zeros_like(ids))  # L x [B, P, D]
                index = first.unsqueeze(-1).expand(-1, -1, layers[0].size(-1))  # [B, T] -> [B, T, D]
                words = [layer.gather(1, index) for layer in layers]  # L x [B, T, D]
        return self.dropout(combine_layers(words, self.how, self.mix))


@dataclass
class FeatureData(WordVectorData):
    """The data options of a task whose model can take a frozen encoder's layers as extra input
    (classification, tagging): what each task's data config adds to WordVectorData."""

    features_from: str = opt("", "a run or Hugging Face directory of a BERT-family encoder, or an ELMo run, whose frozen layers join the word-level input of a model that takes them")
    features_layers: str = opt("last", "data.features_from: last, sum4 (sum of the last four layers), cat4 (their concatenation) or mix (a learned scalar mix of all, Peters et al. 2018)")
    features_dropout: float = opt(0.0, "data.features_from: dropout on the combined features (Peters et al. 2018 §3.3), in [0, 1)")
    features_layer_norm: bool = opt(False, "data.features_layers=mix: layer-normalise each layer before the mix (Peters et al. 2018 §3.2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(self.features_layers in LAYER_COMBINATIONS, "data.features_layers", self.features_layers,
                  ", ".join(LAYER_COMBINATIONS))
        check_key(isinstance(self.features_dropout, (int, float)) and not isinstance(self.features_dropout, bool)
                  and 0.0 <= self.features_dropout < 1.0, "data.features_dropout", self.features_dropout,
                  "a probability in [0, 1)")
        check_key(isinstance(self.features_layer_norm, bool), "data.features_layer_norm", self.features_layer_norm,
                  "true or false")


def frozen_layers(source: FeatureSource | None, data: FeatureData) -> FrozenLayers | None:
    """The frozen feature encoder a task's data options ask for, or None without data.features_from."""
    if source is None:
        return None
    return FrozenLayers(source, data.features_layers, data.features_dropout, data.features_layer_norm)


def mix_weights(run_path: str | Path) -> dict | None:
    """The scalar mix a feature-based run learned: {"weights": softmax-normalised, one per layer (input
    first), "gamma": float}; None when the run mixes no layers."""
    path = Path(run_path) / "model.safetensors"
    if not path.is_file():
        raise TextnnError(f"{path}: no such file; give the directory of a trained run")
    state = load_file(str(path))
    if "frozen.mix.weights" not in state:
        return None
    return {"weights": torch.softmax(state["frozen.mix.weights"].float(), dim=0).tolist(),
            "gamma": float(state["frozen.mix.gamma"])}

