"""BERT: a bidirectional Transformer encoder (Devlin et al. 2019, "BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding").

Token + learned position + segment embeddings -> LayerNorm -> dropout -> N post-LN Transformer
blocks (modules/transformer.py) over every position at once, padding masked out of attention ->
per-token states; the pooler, tanh(W h_[CLS] + b), gives one vector per sequence.

- Input representation (§3, Figure 2): the sum of the three embeddings; inputs are packed as
  [CLS] a [SEP] (b [SEP]) with segment ids 0/1 (data/packing.py), which the encoder reads as the
  "segments" token feature (all zeros when not given).
- Blocks: post-LN as in Vaswani et al. 2017 §3.1 (BERT's released code); GELU with the erf
  (Hendrycks & Gimpel 2016; §3.1's "gelu") and LayerNorm eps 1e-12, the released code's values, so
  Hugging Face checkpoints load exactly (interop/huggingface.py).
- Pooler (§3, "C"; released code's `pooled_output`): a dense tanh layer on the [CLS] state, what
  sentence and pair classifiers read. `pooler: false` (checkpoints saved without one) gives the
  [CLS] state itself as the sentence vector.
- Initialisation N(0, 0.02) for weights and embeddings, zero biases (released code,
  initializer_range 0.02); a head put on the encoder gets the same (`init_head`).

forward(ids [B, T], mask [B, T], features.segments [B, T]) -> EncoderOutput(tokens [B, T, D],
sentence [B, D]). T may not exceed `max_positions` (`max_length`, which tasks check).
"""

# B batch, T sequence length, D model dim (d_model), H heads, F feed-forward dim (d_ff), L layers,
# P max positions, G segment types

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, is_int, opt
from textnn.errors import TextnnError
from textnn.models.base import (Encoder, EncoderOutput, Head, InputSpec, LayerGroups, TokenFeatures, require_choice,
                                require_ints)
from textnn.modules.dropout import Dropout
from textnn.modules.init import init_normal
from textnn.modules.positions import LearnedPositions
from textnn.modules.transformer import TransformerBlock

INIT_STD = 0.02


@dataclass
class BertConfig(ModelOptions):
    n_layers: int = opt(2, "number of Transformer blocks L")
    n_heads: int = opt(2, "attention heads per block; must divide d_model")
    d_model: int = opt(128, "hidden size D")
    d_ff: int = opt(0, "feed-forward hidden size F; 0 = 4 * d_model (BERT)")
    max_positions: int = opt(512, "learned positions: the longest input read (BERT: 512)")
    segments: int = opt(2, "segment (token type) embeddings; 0 = none (checkpoints without them)")
    dropout: float = opt(0.1, "dropout on the embeddings and on each block's residual branches (hidden_dropout_prob)", retunable=True)
    attention_dropout: float = opt(0.1, "dropout on the attention probabilities (attention_probs_dropout_prob)", retunable=True)
    eps: float = opt(1e-12, "LayerNorm epsilon (BERT's released code: 1e-12)")
    gelu: str = opt("exact", "GELU of the feed-forward layers: exact (erf, BERT) or tanh (the approximation)")
    pooler: bool = opt(True, "the dense tanh pooler over [CLS] (false: the [CLS] state is the sentence vector)")

    def __post_init__(self) -> None:
        require_ints(self, "n_layers", "n_heads", "d_model", "max_positions")
        _check(is_int(self.d_ff) and self.d_ff >= 0, "d_ff", self.d_ff, "an integer >= 0 (0 = 4 * d_model)")
        require_ints(self, "segments", at_least=0)
        _check(self.d_model % self.n_heads == 0, "d_model", self.d_model, f"a multiple of model.n_heads = {self.n_heads}")
        for key in ("dropout", "attention_dropout"):
            _check(0.0 <= getattr(self, key) < 1.0, key, getattr(self, key), "a probability in [0, 1)")
        _check(0.0 < self.eps < 1.0, "eps", self.eps, "a small number > 0")
        require_choice(self, "gelu", ("exact", "tanh"))

    @property
    def ff_size(self) -> int:
        return self.d_ff or 4 * self.d_model


class Bert(Encoder):
    """BERT encoder; see the module docstring for the architecture and the papers."""

    config_class = BertConfig
    gives_tokens = True
    gives_sentence = True
    reads = ("segments",)
    gives_layers = True  # hidden_layers: feature extraction (data.features_from)
    gives_attention = True  # forward_with_attention: the attention view

    def __init__(self, cfg: BertConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embedding = nn.Embedding(spec.vocab_size, cfg.d_model, padding_idx=spec.pad_id)
        self.position_embedding = LearnedPositions(cfg.max_positions, cfg.d_model)
        self.segment_embedding = nn.Embedding(cfg.segments, cfg.d_model) if cfg.segments else None
        self.ln_embedding = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.drop = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(cfg.d_model, cfg.n_heads, cfg.ff_size, dropout=cfg.dropout,
                             attention_dropout=cfg.attention_dropout, eps=cfg.eps, norm_first=False,
                             activation="gelu" if cfg.gelu == "exact" else "gelu_tanh")
            for _ in range(cfg.n_layers))
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model) if cfg.pooler else None
        self.token_size = self.sentence_size = cfg.d_model
        init_normal(self.modules(), INIT_STD)
        with torch.no_grad():
            self.token_embedding.weight[spec.pad_id].zero_()  # the padding row stays zero (nn.Embedding's rule)

    @classmethod
    def max_length(cls, cfg: BertConfig) -> int:
        return cfg.max_positions

    def init_head(self, head: Head) -> None:
        """N(0, 0.02) weights and zero biases, as BERT's released code initialises its classifier."""
        init_normal(head.modules(), INIT_STD, skip=self.parameters())

    def output_embedding(self) -> nn.Parameter | None:
        return self.token_embedding.weight  # [V, D]: the MLM output layer is tied to it (released code)

    def layer_groups(self) -> LayerGroups:
        """The embeddings (and their LayerNorm), one group per block, the pooler last."""
        embeddings = [m for m in (self.token_embedding, self.position_embedding, self.segment_embedding,
                                  self.ln_embedding) if m is not None]
        groups: LayerGroups = [("embedding", embeddings)]
        groups += [(f"block{index + 1}", [block]) for index, block in enumerate(self.blocks)]
        if self.pooler is not None:
            groups.append(("pooler", [self.pooler]))
        return groups

    # ----------------------------------------------------------------------------------------------
    def _embed(self, ids: torch.Tensor, segments: torch.Tensor | None) -> torch.Tensor:
        if ids.size(1) > self.cfg.max_positions:
            raise TextnnError(f"BERT reads at most model.max_positions = {self.cfg.max_positions} tokens, got "
                              f"{ids.size(1)}; lower data.max_length to <= {self.cfg.max_positions}")
        x = self.token_embedding(ids) + self.position_embedding(0, ids.size(1))  # [B, T, D]
        if self.segment_embedding is not None:
            if segments is None:
                segments = torch.zeros_like(ids)  # one sentence: every token in segment 0
            x = x + self.segment_embedding(segments)
        return self.drop(self.ln_embedding(x))  # [B, T, D]

    def _sentence(self, tokens: torch.Tensor) -> torch.Tensor:
        first = tokens[:, 0]  # [B, T, D] -> [B, D]: the [CLS] position
        return torch.tanh(self.pooler(first)) if self.pooler is not None else first

    def _run_blocks(self, ids: torch.Tensor, mask: torch.Tensor | None, segments: torch.Tensor | None,
                    need_weights: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The one pass through the embeddings and blocks: ids [B, T], mask [B, T] bool or None (no
        padding) -> (every block's output, L x [B, T, D]; their attention maps L x [B, H, T, T] (need_weights))."""
        x = self._embed(ids, segments)  # [B, T, D]
        # Without padding no mask is needed, and SDPA may take its fastest kernel.
        key_mask = None if mask is None or bool(mask.all()) else mask
        layers, maps = [], []
        for block in self.blocks:
            out = block(x, key_mask=key_mask, need_weights=need_weights)
            x = out.hidden
            layers.append(x)
            if need_weights:
                maps.append(out.weights)  # [B, H, T, T]
        return layers, maps

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        """ids [B, T], mask [B, T] bool (True = real token) -> tokens [B, T, D], sentence [B, D]."""
        layers, _ = self._run_blocks(ids, mask, features.segments if features is not None else None)
        return EncoderOutput(tokens=layers[-1], sentence=self._sentence(layers[-1]))

    def hidden_layers(self, ids: torch.Tensor, mask: torch.Tensor,
                      segments: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The output of every block, L x [B, T, D] (the last is `forward`'s tokens): what feature-based
        use combines (modules/scalar_mix.py; Devlin et al. 2019 §5.3)."""
        return self._run_blocks(ids, mask, segments)[0]

    @torch.no_grad()
    def forward_with_attention(self, ids: torch.Tensor, mask: torch.Tensor | None = None,
                               segments: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`'s token states on the explicit attention path, plus every attention map
        [L, B, H, T, T] (for visualisation)."""
        layers, maps = self._run_blocks(ids, mask, segments, need_weights=True)
        return layers[-1], torch.stack(maps)  # [B, T, D], [L, B, H, T, T]


# ------------------------------------------------------------------------------------------- presets

# What every BERT preset shares; each sets its size on it.
_BASE = BertConfig(d_ff=0, max_positions=512, segments=2, dropout=0.1, attention_dropout=0.1, eps=1e-12, gelu="exact",
                   pooler=True)
PRESETS: dict[str, Preset] = {
    # For tests: two blocks so the residual stack is exercised, dropout on so train mode differs.
    "tiny": Preset(replace(_BASE, n_layers=2, n_heads=2, d_model=16, max_positions=64)),
    # The compact BERTs of Turc et al. 2019 ("Well-Read Students Learn Better", Table 1 / released
    # grid): BERT-Mini L=4, H=256 and BERT-Small L=4, H=512, heads of 64, F = 4H.
    "mini": Preset(replace(_BASE, n_layers=4, n_heads=4, d_model=256)),
    "small": Preset(replace(_BASE, n_layers=4, n_heads=8, d_model=512)),
    # BERT-Base (Devlin et al. 2019 §3: L=12, H=768, A=12, 110M parameters).
    "base": Preset(replace(_BASE, n_layers=12, n_heads=12, d_model=768)),
}
PRESETS["paper"] = PRESETS["base"]
Bert.presets = PRESETS
