"""Transformer-XL language model: segment-level recurrence + relative positions (Dai et al. 2019).

Dai, Yang, Yang, Carbonell, Le & Salakhutdinov (2019), "Transformer-XL: Attentive Language Models
Beyond a Fixed-Length Context". A decoder-only Transformer that reads a long stream one segment of
T tokens at a time and, at every layer, also attends to the hidden states it computed for the
previous M positions (the memory, §3.2), without backpropagating into them. Because those cached
states carry no absolute position, attention scores use relative distances only (§3.3; see
`modules.relative_attention`). Context then grows with depth: the longest dependency is O(N x M)
for N layers, and evaluation reuses the cache instead of recomputing a sliding window for every
token (§3.2, last paragraphs; `benchmarks/xl_eval_speed.py` measures that speed-up here).

State. `forward(ids, mask, state)` takes and returns the memory: a list of N tensors [B, M, D], entry n
holding the INPUT of layer n (the embedding output for n = 0) at the newest M positions seen so
far, detached. Passing it back with the next segment of the same streams continues them; with
`state=None` a stream starts with no context. M is `mem_len` in training and `eval_mem_len` in
eval mode (Dai et al. §3.2: "we set M equal to the segment length during training, and increase it
by multiple times during evaluation"). `step` is the generation interface: the memory is its cache.

As an encoder, Transformer-XL gives the final states (dropout applied) at every position of the
segment; the output layer is the task's `LMHead`, sharing `output_embedding()` when tied.

Choices, and why:
- u and v (the global content and position biases of §3.3) are ONE pair shared by all layers, as in
  the authors' PyTorch code (`MemTransformerLM.r_w_bias`, `r_r_bias`; their TF code can untie them).
- Post-LN by default (`pre_ln: false`): it is the paper's block (LayerNorm after each residual sum)
  and the one its reported numbers were measured with. `pre_ln: true` normalises each sub-layer's
  input instead and adds a final LayerNorm, which trains without warmup on short budgets.
- Initialisation and scale follow the authors' code: every weight matrix, the embedding and the
  output layer included (`init_head`), starts from N(0, 0.02), and embeddings are multiplied by
  sqrt(D) before the first layer (`AdaptiveEmbedding.emb_scale`). A larger embedding init would
  hurt with tied weights: after a post-LN layer the state of position t still points along its own
  token's embedding e, so that token's logit starts near sqrt(D) * |e| (about 4 nats for D = 200
  here; 14 with an N(0, 1/D) init).
  Dropout is applied to embeddings, position encodings, sub-layer outputs and the final states
  (their code); `dropatt` to the attention probabilities.
- No adaptive softmax (the paper uses one on WT103): a plain, optionally tied, output layer.
"""

# B batch (parallel streams), T segment length, M memory length, K = M + T keys, D d_model,
# H heads, Dh head dim, F feed-forward dim, V vocabulary size, N layers, B' batch rows kept by reorder

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, is_int, opt
from textnn.errors import TextnnError
from textnn.models.base import (Encoder, EncoderOutput, Head, InputSpec, LayerGroups, TokenFeatures, require_ints,
                                require_probabilities)
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.init import init_normal
from textnn.modules.positions import sinusoid_encoding
from textnn.modules.relative_attention import RelativeMultiHeadAttention, relative_causal_mask, relative_distances
from textnn.modules.transformer import FeedForward, residual

Memory = list[torch.Tensor]  # N tensors [B, M, D]; None = no context yet
INIT_STD = 0.02  # the authors' init_std


@dataclass
class TransformerXLConfig(ModelOptions):
    n_layers: int = opt(2, "number of Transformer layers N")
    n_heads: int = opt(4, "attention heads H per layer")
    d_model: int = opt(200, "model (and embedding) size D; even, for the sinusoid encodings")
    d_head: int = opt(40, "size Dh of each head; H * Dh need not equal D (the paper's WT103 base: 10 x 41 for 410)")
    d_ff: int = opt(400, "inner size F of the position-wise feed-forward layer")
    mem_len: int = opt(64, "memory M in training: cached positions per layer (Dai et al. set it to the segment length, data.bptt); 0 = no memory")
    eval_mem_len: int = opt(0, "memory in evaluation and generation, usually several times mem_len (Dai et al. §3.2); 0 = mem_len")
    clamp_len: int = opt(0, "relative distances above this share one encoding (the authors' WT103 evaluation: 400); 0 = no clamp")
    same_length: bool = opt(False, "evaluation only: every position attends to exactly the last eval_mem_len positions, itself included, wherever it sits in its segment (the authors' evaluation setting)")
    dropout: float = opt(0.1, "dropout on embeddings, position encodings, sub-layer outputs and the final states", retunable=True)
    dropatt: float = opt(0.0, "dropout on the attention probabilities", retunable=True)
    tie_weights: bool = opt(True, "share the output layer's weights with the embeddings (Press & Wolf 2017)")
    pre_ln: bool = opt(False, "LayerNorm before each sub-layer plus a final one; false = the paper's post-LN block")

    def __post_init__(self) -> None:
        require_ints(self, "n_layers", "n_heads", "d_head", "d_ff")
        _check(is_int(self.d_model) and self.d_model >= 2 and self.d_model % 2 == 0, "d_model", self.d_model,
               "an even integer >= 2 (the sinusoid encodings pair a sine with a cosine)")
        require_ints(self, "mem_len", "eval_mem_len", "clamp_len", at_least=0)
        require_probabilities(self, "dropout", "dropatt", expected="a number in [0, 1)")
        _check(not self.same_length or self.eval_memory >= 1, "same_length", self.same_length,
               "false, or a memory of at least 1 (model.eval_mem_len, or model.mem_len when it is 0): "
               "same_length lets each position see exactly that many positions")

    @property
    def eval_memory(self) -> int:
        """The memory length used in eval mode (`eval_mem_len`, or `mem_len` when it is 0)."""
        return self.eval_mem_len or self.mem_len


# The feed-forward layer was an nn.Sequential (Linear, ReLU, Dropout, Linear, Dropout) before it became
# the shared FeedForward (fc, proj). Runs on disk name its weights feed_forward.net.0 / net.3, so the
# layer's state_dict() keeps writing those names and load_state_dict() reads them: old and new runs
# load alike. Saved name prefix -> attribute name prefix.
_SAVED_NAMES = {"feed_forward.net.0.": "feed_forward.fc.", "feed_forward.net.3.": "feed_forward.proj."}


def _rename(state_dict: dict, prefix: str, names: dict[str, str]) -> None:
    """Rename, in place and keeping their order, the entries of `state_dict` under `prefix` whose name
    starts with a key of `names`."""

    def renamed(key: str) -> str:
        for old, new in names.items():
            if key.startswith(prefix + old):
                return prefix + new + key[len(prefix + old):]
        return key

    entries = list(state_dict.items())
    state_dict.clear()
    state_dict.update((renamed(key), value) for key, value in entries)


def _to_saved_names(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """state_dict() hook: the attribute names -> the saved names."""
    _rename(state_dict, prefix, {attribute: saved for saved, attribute in _SAVED_NAMES.items()})


def _from_saved_names(module: nn.Module, state_dict: dict, prefix: str, *load_arguments: object) -> None:
    """load_state_dict() hook: the saved names -> the attribute names."""
    _rename(state_dict, prefix, _SAVED_NAMES)


class XLLayer(nn.Module):
    """One Transformer-XL layer: relative attention over [memory; segment], then the feed-forward
    network (ReLU, dropout inside as in the authors' code), each a residual sub-layer
    (`modules.transformer.residual`).

    Post-LN: h = LN(x + Attn(x)); out = LN(h + FF(h)).  Pre-LN: h = x + Attn(LN(x)); out = h + FF(LN(h)),
    where the memory is normalised with the same LayerNorm as the segment (it is the same layer's input).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_ff: int, dropout: float, dropatt: float,
                 pre_ln: bool) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.attention = RelativeMultiHeadAttention(d_model, n_heads, d_head, dropatt)
        self.norm_attention = nn.LayerNorm(d_model)
        self.feed_forward = FeedForward(d_model, d_ff, activation="relu", dropout=dropout)
        self.norm_feed_forward = nn.LayerNorm(d_model)
        self.drop = Dropout(dropout)
        self.register_state_dict_post_hook(_to_saved_names)
        self.register_load_state_dict_pre_hook(_from_saved_names)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, pos: torch.Tensor, u: torch.Tensor,
                v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """x [B, T, D], memory [B, M, D] or None -> [B, T, D]; the other arguments are RelativeMultiHeadAttention's."""
        if self.pre_ln and memory is not None:
            memory = self.norm_attention(memory)

        def attend(h: torch.Tensor) -> torch.Tensor:
            return self.attention(h, memory, pos, u, v, allowed)

        x = residual(x, self.norm_attention, attend, self.drop, self.pre_ln)
        return residual(x, self.norm_feed_forward, self.feed_forward, self.drop, self.pre_ln)


def _newest(x: torch.Tensor, n: int) -> torch.Tensor:
    """The last n positions of [B, S, D] (none when n = 0; `x[:, -0:]` would keep them all)."""
    return x[:, max(x.size(1) - n, 0):]


class RelativeBiases(nn.Module):
    """u and v of §3.3, the global content and position biases of the attention scores, ONE pair
    shared by all layers (see the module docstring); N(0, 0.02) as the authors initialise them."""

    def __init__(self, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.content = nn.Parameter(torch.randn(n_heads, d_head) * INIT_STD)  # u [H, Dh]
        self.position = nn.Parameter(torch.randn(n_heads, d_head) * INIT_STD)  # v [H, Dh]


class TransformerXL(Encoder):
    """Transformer-XL encoder: tokens[b, t] is what the output layer reads to score ids[b, t + 1].

    forward(ids [B, T], mask, state) -> EncoderOutput(tokens [B, T, D], state = memory, N x [B, M, D])
    step(ids [B, T'], state)         -> (states of the last position [B, D], memory)  (generation)
    reorder(memory, indices)         -> the memory of the batch rows `indices`        (beam search)

    `mask` is not read: attention is causal, and stream padding only ever follows the real tokens.
    `step` (the Encoder's) reads the new tokens with the memory as its cache: each call attends to at
    most `eval_mem_len` cached positions in eval mode, so generating past that length keeps a
    fixed-cost sliding context, as Transformer-XL evaluates.
    """

    config_class = TransformerXLConfig
    gives_tokens = True
    causal = True

    def __init__(self, cfg: TransformerXLConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.d_model, spec.pad_id)
        self.scale = cfg.d_model ** 0.5
        self.drop = Dropout(cfg.dropout)
        self.biases = RelativeBiases(cfg.n_heads, cfg.d_head)
        self.layers = nn.ModuleList(
            XLLayer(cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_ff, cfg.dropout, cfg.dropatt, cfg.pre_ln)
            for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()
        self.token_size = cfg.d_model
        init_normal(self.modules(), INIT_STD)  # the authors' init (module docstring)
        with torch.no_grad():
            self.embedding.weight[spec.pad_id].zero_()

    def init_head(self, head: Head) -> None:
        """N(0, 0.02) weights and zero biases for the head too (an untied output layer, as the authors'
        code initialises every Linear); a tied output embedding is the embedding, left alone."""
        init_normal(head.modules(), INIT_STD, skip=self.parameters())

    def output_embedding(self) -> nn.Parameter | None:
        return self.embedding.weight if self.cfg.tie_weights else None  # [V, D]

    def layer_groups(self) -> LayerGroups:
        """The embedding with u and v (every layer reads them), then one group per layer; the final
        LayerNorm (pre-LN) belongs to the last layer."""
        groups: LayerGroups = [("embedding", [self.embedding, self.biases])]
        for index, layer in enumerate(self.layers):
            last = index == len(self.layers) - 1
            groups.append((f"layer{index + 1}", [layer, self.final_norm] if last else [layer]))
        return groups

    # ----------------------------------------------------------------------------------------------
    def memory_length(self) -> int:
        """M for the current mode: `mem_len` while training, `eval_mem_len` (or `mem_len`) in eval mode."""
        return self.cfg.mem_len if self.training else self.cfg.eval_memory

    def _check_memory(self, state: object, batch: int) -> Memory | None:
        if state is None:
            return None
        n_layers = self.cfg.n_layers
        if (not isinstance(state, (list, tuple)) or len(state) != n_layers
                or any(not isinstance(m, torch.Tensor) or m.dim() != 3 for m in state)):
            raise TextnnError(f"transformer_xl state must be the memory returned by its previous call: a list "
                              f"of {n_layers} tensors [B, M, D] (one per layer), got {type(state).__name__}")
        shapes = {tuple(m.shape) for m in state}
        if len(shapes) != 1 or next(iter(shapes))[0] != batch or next(iter(shapes))[2] != self.cfg.d_model:
            raise TextnnError(f"transformer_xl memory shapes {sorted(shapes)} do not fit a batch of {batch} "
                              f"streams and d_model {self.cfg.d_model}; pass back the state returned for the "
                              f"same streams, or None to start them afresh")
        return list(state)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        """Final states [B, T, D] (dropout applied, what the output layer reads) and the new memory.

        The evaluation benchmark projects only the positions it scores from these.
        """
        batch, q_len = ids.shape
        keep = self.memory_length()
        memory = self._check_memory(state, batch)
        if memory is not None:
            memory = [_newest(m, keep) for m in memory]  # a longer memory (e.g. from eval) is cut to M
            if memory[0].size(1) == 0:
                memory = None
        mem_len = 0 if memory is None else memory[0].size(1)

        x = self.drop(self.embedding(ids) * self.scale)  # [B, T, D]
        distances = relative_distances(mem_len + q_len, self.cfg.clamp_len, ids.device)  # [K]
        pos = self.drop(sinusoid_encoding(distances, self.cfg.d_model).to(x.dtype))  # [K, D]
        span = self.cfg.eval_memory if self.cfg.same_length and not self.training else 0
        allowed = relative_causal_mask(q_len, mem_len, span, ids.device)  # [T, K]

        new_memory: Memory = []
        for n, layer in enumerate(self.layers):
            layer_memory = None if memory is None else memory[n]
            if keep > 0:  # this layer's input at the newest M positions: the next segment's memory
                seen = x if layer_memory is None else torch.cat([layer_memory, x], dim=1)  # [B, M+T, D]
                new_memory.append(_newest(seen, keep).detach())  # [B, min(M+T, keep), D]
            x = layer(x, layer_memory, pos, self.biases.content, self.biases.position, allowed)  # [B, T, D]
        return EncoderOutput(tokens=self.drop(self.final_norm(x)), state=new_memory or None)

    @staticmethod
    def reorder(state: Memory | None, indices: torch.Tensor) -> Memory | None:
        """The memory of the batch rows `indices` [B']: each layer's [B, M, D] -> [B', M, D]."""
        if state is None:
            return None
        return [m.index_select(0, indices) for m in state]


# ------------------------------------------------------------------------------------------- presets

PRESETS: dict[str, Preset] = {
    # For tests: two layers (the memory of a layer > 0 is a layer's output), H * Dh != D.
    "tiny": Preset(
        TransformerXLConfig(n_layers=2, n_heads=2, d_model=16, d_head=6, d_ff=24, mem_len=8,
                            eval_mem_len=16, clamp_len=0, same_length=False, dropout=0.1, dropatt=0.1,
                            tie_weights=True, pre_ln=False)),
    # WikiText-2 on a CPU, sized like a 2-layer, 200-unit tied LSTM LM: with the whitespace vocabulary
    # of WikiText-2 train (33,279 entries incl. <pad>, <unk>, <eos>) this has 7,332,199 parameters
    # (6,655,800 of them the tied embedding, 642,800 in the two layers); the LSTM has 7,332,279 (the
    # same embedding, 643,200 LSTM weights, the output bias). Memory = the segment (data.bptt 64) in
    # training, 4 x that in evaluation.
    "small": Preset(
        TransformerXLConfig(n_layers=2, n_heads=4, d_model=200, d_head=40, d_ff=400, mem_len=64,
                            eval_mem_len=256, clamp_len=0, same_length=False, dropout=0.1, dropatt=0.0,
                            tie_weights=True, pre_ln=False)),
    # For reference: the authors' WikiText-103 base model (run_wt103_base.sh in their code: 16 layers,
    # D 410, 10 heads of 41, F 2100, dropout 0.1, dropatt 0, training memory = segment = 150; evaluation
    # with a 640-token memory, clamp 400, same_length). Their 24.0 test perplexity also relies on an
    # adaptive softmax, which textnn does not have.
    "paper_wt103_base": Preset(
        TransformerXLConfig(n_layers=16, n_heads=10, d_model=410, d_head=41, d_ff=2100, mem_len=150,
                            eval_mem_len=640, clamp_len=400, same_length=True, dropout=0.1, dropatt=0.0,
                            tie_weights=True, pre_ln=False)),
}
PRESETS["paper"] = PRESETS["paper_wt103_base"]  # every family's "paper" preset is its published setting
TransformerXL.presets = PRESETS
