"""GPT: a decoder-only Transformer language model (Radford et al. 2018; GPT-2, Radford et al. 2019).

Token embedding + learned position embedding -> dropout -> N pre-LN Transformer blocks with causal
self-attention (modules/transformer.py) -> final LayerNorm (-> linear map to vocabulary logits).

As an encoder, GPT gives the final LayerNorm's output at every position; the linear map to the
vocabulary is the task's `LMHead`, with no bias (`lm_bias = False`: GPT-2's output layer is the
transposed token embedding alone) and sharing `output_embedding()` when tied.

- Pre-LN blocks and the final LayerNorm: GPT-2 §2.3.
- Initialisation N(0, 0.02) for every weight matrix and embedding (GPT-1 §4.1 "a simple weight
  initialization of N(0, 0.02) was sufficient"); the two projections that write into the residual
  stream in each block (attention output, second FFN layer) are further scaled by 1/sqrt(2 N)
  (GPT-2 §2.3: "scale the weights of residual layers at initialization by a factor of 1/sqrt(N)
  where N is the number of residual layers"; a block holds two of them). A head put on the encoder
  gets the same N(0, 0.02) (`init_head`; an untied output layer, as nanoGPT initialises its lm_head).
- `tie`: the output layer reuses the token embedding matrix (Press & Wolf 2017, "Using the Output
  Embedding to Improve Language Models"), as GPT-2 does.

forward(ids [B, T], mask, state) -> EncoderOutput(tokens [B, T, D], state=None). The model has no
memory across windows: the incoming state is ignored and T may not exceed `context` (the number of
learned positions; `max_length`, which the language-modelling task checks data.bptt against before
a run starts). step(ids [B, T'], cache) -> (states [B, D] of the last position, cache): the
decoding interface with a key/value cache (GPTCache), so each new token costs one position's work
instead of a full forward.

Past the context: positions are absolute and learned, so cached keys cannot be shifted to new
positions. When the cache would grow beyond `context`, `step` recomputes from scratch on the last
context - 1 tokens read plus the new one (nanoGPT's `generate` crops to the last block_size tokens
the same way), so cached decoding gives exactly the states of a full forward over that window; from
then on each step costs one forward over `context` tokens.
"""

# B batch, T tokens in the window, T' new tokens of a step, S cached positions, V vocabulary size,
# D model dim (d_model), H heads, F feed-forward dim (d_ff), L layers, C context (max positions),
# B' batch rows kept by reorder

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, is_int, opt
from textnn.errors import TextnnError
from textnn.models.base import (Encoder, EncoderOutput, Head, InputSpec, LayerGroups, TokenFeatures, require_choice,
                                require_ints)
from textnn.modules.attention import KVCache
from textnn.modules.dropout import Dropout
from textnn.modules.init import init_normal
from textnn.modules.positions import LearnedPositions
from textnn.modules.transformer import TransformerBlock

INIT_STD = 0.02


@dataclass
class GPTConfig(ModelOptions):
    n_layers: int = opt(4, "number of Transformer blocks L")
    n_heads: int = opt(4, "attention heads per block; must divide d_model")
    d_model: int = opt(128, "model (embedding and residual stream) size D")
    d_ff: int = opt(0, "feed-forward hidden size F; 0 = 4 * d_model (GPT-2)")
    context: int = opt(64, "maximum sequence length (learned positions); data.bptt must not exceed it")
    dropout: float = opt(0.0, "dropout on embeddings, attention probabilities and each residual branch", retunable=True)
    tie: bool = opt(True, "share the output layer's weights with the token embedding (Press & Wolf 2017)")
    bias: bool = opt(True, "biases in the linear and LayerNorm layers (GPT-2: true; nanoGPT's default: false)")
    gelu: str = opt("tanh", "GELU of the feed-forward layers: tanh (the approximation GPT-2 uses) or exact (erf)")

    def __post_init__(self) -> None:
        require_ints(self, "n_layers", "n_heads", "d_model", "context")
        _check(is_int(self.d_ff) and self.d_ff >= 0, "d_ff", self.d_ff, "an integer >= 0 (0 = 4 * d_model)")
        _check(self.d_model % self.n_heads == 0, "d_model", self.d_model,
               f"a multiple of model.n_heads = {self.n_heads}")
        _check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "a probability in [0, 1)")
        require_choice(self, "gelu", ("tanh", "exact"))

    @property
    def ff_size(self) -> int:
        """The feed-forward hidden size actually used."""
        return self.d_ff or 4 * self.d_model


@dataclass
class GPTCache:
    """What `GPT.step` carries between calls: per-layer keys/values and the tokens they came from."""

    layers: list[KVCache]  # one per block, keys/values [B, H, S, Dh]
    tokens: torch.Tensor  # [B, S] the tokens read so far (at most `context`), for recomputation

    @property
    def offset(self) -> int:
        """Position of the next token: the number of cached positions S."""
        return self.tokens.size(1)


class GPT(Encoder):
    """Decoder-only Transformer encoder; see the module docstring for the architecture and the papers.

    `mask` is not read: attention is causal, so a real token never attends to the stream padding
    that can only follow it.
    """

    config_class = GPTConfig
    gives_tokens = True
    causal = True
    windowed = True  # a fixed context: nothing carries over from one window to the next
    lm_bias = False  # GPT-2's output layer: logits = h W_e^T, no bias
    gives_attention = True  # forward_with_attention: the attention view

    def __init__(self, cfg: GPTConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embedding = nn.Embedding(spec.vocab_size, cfg.d_model)
        self.position_embedding = LearnedPositions(cfg.context, cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(cfg.d_model, cfg.n_heads, cfg.ff_size, dropout=cfg.dropout, bias=cfg.bias,
                             activation="gelu_tanh" if cfg.gelu == "tanh" else "gelu")
            for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.token_size = cfg.d_model
        self._init_weights()

    @classmethod
    def max_length(cls, cfg: GPTConfig) -> int:
        return cfg.context

    def _init_weights(self) -> None:
        init_normal(self.modules(), INIT_STD)
        residual_std = INIT_STD / math.sqrt(2 * self.cfg.n_layers)  # GPT-2 §2.3
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.ff.proj.weight, mean=0.0, std=residual_std)

    def init_head(self, head: Head) -> None:
        """N(0, 0.02) weights and zero biases for the head's layers too, as for every layer of the
        model (a tied output embedding is the token embedding, already initialised)."""
        init_normal(head.modules(), INIT_STD, skip=self.parameters())

    def output_embedding(self) -> nn.Parameter | None:
        return self.token_embedding.weight if self.cfg.tie else None  # [V, D]

    def layer_groups(self) -> LayerGroups:
        """Both embeddings, then one group per block; the final LayerNorm belongs to the last block."""
        groups: LayerGroups = [("embedding", [self.token_embedding, self.position_embedding])]
        for index, block in enumerate(self.blocks):
            last = index == len(self.blocks) - 1
            groups.append((f"block{index + 1}", [block, self.ln_final] if last else [block]))
        return groups

    # ----------------------------------------------------------------------------------------------
    def _embed(self, ids: torch.Tensor, offset: int) -> torch.Tensor:
        """ids [B, T] at positions offset .. offset + T - 1 -> [B, T, D]."""
        return self.drop(self.token_embedding(ids) + self.position_embedding(offset, ids.size(1)))  # [B, T, D]

    def _run_blocks(self, x: torch.Tensor, caches: list[KVCache] | None = None, use_cache: bool = False,
                    need_weights: bool = False) -> tuple[torch.Tensor, list[KVCache], list[torch.Tensor]]:
        """The one pass through the blocks (causal self-attention): x [B, T, D] after `caches` (one per
        block, or None) -> (states [B, T, D] before the final LayerNorm, the blocks' new caches
        (use_cache), their attention maps L x [B, H, T, S] (need_weights))."""
        new_caches, maps = [], []
        for index, block in enumerate(self.blocks):
            out = block(x, causal=True, cache=caches[index] if caches is not None else None, use_cache=use_cache,
                        need_weights=need_weights)
            x = out.hidden
            if use_cache:
                new_caches.append(out.cache)
            if need_weights:
                maps.append(out.weights)  # [B, H, T, S]
        return x, new_caches, maps

    def _check_length(self, length: int) -> None:
        if length > self.cfg.context:
            raise TextnnError(f"GPT reads at most model.context = {self.cfg.context} tokens at once, got a window "
                              f"of {length}; lower data.bptt to <= {self.cfg.context} (or raise model.context)")

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        """Final states at every position: ids [B, T] -> tokens [B, T, D]; `state` is ignored."""
        self._check_length(ids.size(1))
        x, _, _ = self._run_blocks(self._embed(ids, 0))  # [B, T, D]
        return EncoderOutput(tokens=self.ln_final(x), state=None)  # [B, T, D]

    @torch.no_grad()
    def forward_with_attention(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` computed on the explicit attention path, plus every attention map.

        ids [B, T] -> (states [B, T, D], attention [L, B, H, T, T]), where attention[l, b, h, i, j] is
        how much position i attends to position j in head h of block l. For visualisation; the
        states equal `forward`'s up to float rounding.
        """
        self._check_length(ids.size(1))
        x, _, maps = self._run_blocks(self._embed(ids, 0), need_weights=True)  # [B, T, D], L x [B, H, T, T]
        return self.ln_final(x), torch.stack(maps)  # [B, T, D], [L, B, H, T, T]

    # ----------------------------------------------------------------------------------------------
    def step(self, ids: torch.Tensor, state: GPTCache | None = None) -> tuple[torch.Tensor, GPTCache]:
        """Read `ids` [B, T'] after the cached positions; return the last position's states [B, D] and the cache.

        A first call (state None) reads a whole prompt; later calls usually one token. When the cached
        positions plus the new ones would exceed `context`, the cache is rebuilt from the last
        `context` tokens (module docstring).
        """
        history = state.tokens if state is not None else ids[:, :0]  # [B, S]
        if history.size(1) + ids.size(1) > self.cfg.context:
            ids = torch.cat([history, ids], dim=1)[:, -self.cfg.context:]  # [B, C] the window to recompute
            state = None
        offset = state.offset if state is not None else 0
        x, layers, _ = self._run_blocks(self._embed(ids, offset), state.layers if state is not None else None,
                                        use_cache=True)  # [B, T', D]
        last = self.ln_final(x[:, -1])  # [B, D]: only the last position is needed
        tokens = torch.cat([history, ids], dim=1) if state is not None else ids  # [B, S + T']
        return last, GPTCache(layers=layers, tokens=tokens)

    @staticmethod
    def reorder(state: GPTCache | None, indices: torch.Tensor) -> GPTCache | None:
        """The cache of the batch rows `indices` [B']: keys/values [B, H, S, Dh] -> [B', H, S, Dh], tokens [B', S]."""
        if state is None:
            return None
        layers = [KVCache(keys=c.keys.index_select(0, indices), values=c.values.index_select(0, indices))
                  for c in state.layers]
        return GPTCache(layers=layers, tokens=state.tokens.index_select(0, indices))


# ------------------------------------------------------------------------------------------- presets

PRESETS: dict[str, Preset] = {
    # For tests: two blocks so the residual stack is exercised, dropout on so train mode differs.
    "tiny": Preset(GPTConfig(n_layers=2, n_heads=2, d_model=16, d_ff=0, context=16, dropout=0.1, tie=True, bias=True)),
    # nanoGPT's CPU Tiny Shakespeare configuration (karpathy/nanoGPT README, "I only have a macbook"):
    # n_layer 4, n_head 4, n_embd 128, block_size 64, dropout 0, and its train.py default bias=False.
    "nanogpt_cpu": Preset(
        GPTConfig(n_layers=4, n_heads=4, d_model=128, d_ff=0, context=64, dropout=0.0, tie=True, bias=False)),
    # WikiText-2 with the whitespace tokenizer (V = 33,279 with <pad>), sized to the 2 x 200 tied LSTM
    # (embedding 200, 2 layers of 200 cells, tied): LSTM 33,279*200 + 2*4*(200*200 + 200*200 + 2*200)
    # + 33,279 (decoder bias) = 7,332,279 parameters; this GPT: 33,279*192 (tied) + 128*192
    # (positions) + 2*(12*192^2 + 13*192) + 2*192 (final LayerNorm) = 7,304,256, within 0.4%.
    # The tied embedding is 87% of the budget: depth and width beyond this cost as much as the LSTM.
    "small": Preset(
        GPTConfig(n_layers=2, n_heads=6, d_model=192, d_ff=0, context=128, dropout=0.2, tie=True, bias=True)),
    # GPT-2 small (Radford et al. 2019, Table 2, first row: 12 layers, d_model 768; context 1024;
    # 12 heads of 64 and dropout 0.1 as in the released hparams).
    "gpt2": Preset(
        GPTConfig(n_layers=12, n_heads=12, d_model=768, d_ff=0, context=1024, dropout=0.1, tie=True,
                  bias=True)),
}
PRESETS["paper"] = PRESETS["gpt2"]  # every family's "paper" preset: here GPT-2 small
GPT.presets = PRESETS
