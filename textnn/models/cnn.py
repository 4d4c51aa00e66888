"""Kim (2014), "Convolutional Neural Networks for Sentence Classification", EMNLP.

§2: word vectors -> convolution filters of several widths with ReLU -> max-over-time pooling of each
feature map (the sentence vector) -> dropout on the pooled (penultimate) layer -> fully connected
softmax layer. The last two are the task's head (`modules.heads.ClassifierHead`); §2.1's
regularization lives there too: dropout p = 0.5 and the max-norm constraint s = 3 on the output
weights (`head.dropout`, `head.max_norm`; the "paper" preset sets both).
§3.3 variants (`mode`):
  rand          embeddings randomly initialised and trained
  static        pretrained vectors kept fixed
  non-static    pretrained vectors fine-tuned
  multichannel  two channels from the same vectors, one fixed and one fine-tuned; "each filter is
                applied to both channels and the results are added" (§2).
Without pretrained vectors (e.g. when a saved run is rebuilt before its weights are loaded) the
pretrained modes start from random vectors.
"""

# B batch, T sequence length, D embedding dim, F feature maps per width, W number of widths

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import ModelOptions, Preset, PresetHead, check_model_field as _check, is_int as _is_int, opt
from textnn.errors import TextnnError
from textnn.models.base import Encoder, EncoderOutput, InputSpec, TokenFeatures, require_choice, require_ints
from textnn.modules.conv import MultiWidthConv
from textnn.modules.embeddings import TokenEmbedding

MODES = ("rand", "static", "non-static", "multichannel")


@dataclass
class KimCNNConfig(ModelOptions):
    mode: str = opt("rand", "embedding variant: rand, static, non-static or multichannel (Kim 2014 §3.3)")
    embedding_dim: int = opt(300, "word embedding size D (must match data.vectors when given)")
    filter_widths: list[int] = opt([3, 4, 5], "widths of the convolution filters, in words")
    num_filters: int = opt(100, "feature maps per filter width")

    def __post_init__(self) -> None:
        require_choice(self, "mode", MODES, one_of=True)
        require_ints(self, "embedding_dim")
        _check(isinstance(self.filter_widths, (list, tuple)) and len(self.filter_widths) > 0
               and all(_is_int(w) and w >= 1 for w in self.filter_widths), "filter_widths", self.filter_widths,
               "a non-empty list of integers >= 1")
        require_ints(self, "num_filters")


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        KimCNNConfig(mode="rand", embedding_dim=8, filter_widths=[2, 3], num_filters=4),
        PresetHead(dropout=0.5, max_norm=3.0)),
    # Kim 2014 §3.1 "Hyperparameters and Training": ReLU, filter windows 3, 4, 5 with 100 feature maps
    # each, dropout 0.5, l2 constraint s = 3 (mini-batches of 50, Adadelta); §3.2: 300-d word2vec
    # vectors. Table 2 reports all four modes; non-static is the single-channel fine-tuned one.
    "paper": Preset(
        KimCNNConfig(mode="non-static", embedding_dim=300, filter_widths=[3, 4, 5], num_filters=100),
        PresetHead(dropout=0.5, max_norm=3.0)),
}


class KimCNN(Encoder):
    """Multi-width CNN with max-over-time pooling: the sentence vector is the pooled feature maps."""

    config_class = KimCNNConfig
    presets = PRESETS
    gives_sentence = True
    uses_vectors = True
    takes_context = True  # a frozen encoder's features join the word embeddings (data.features_from: ELMo)

    def __init__(self, cfg: KimCNNConfig, spec: InputSpec) -> None:
        super().__init__()
        if cfg.mode == "rand" and spec.pretrained is not None:
            raise TextnnError("model.mode = 'rand' trains randomly initialised embeddings but pretrained word "
                              "vectors were given; set model.mode to static, non-static or multichannel, "
                              "or remove data.vectors")
        self.cfg = cfg
        # The trained channel (rand, non-static, multichannel) or the only, fixed one (static).
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id, spec.pretrained,
                                        freeze=cfg.mode == "static")
        self.static_embedding: TokenEmbedding | None = None
        if cfg.mode == "multichannel":
            # The fixed channel starts from the same vectors as the trained one (random ones if none given).
            self.static_embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id,
                                                   self.embedding.weight.detach().clone(), freeze=True)
        self.context_dim = spec.context_dim
        self.conv = MultiWidthConv(cfg.embedding_dim + spec.context_dim, cfg.num_filters, cfg.filter_widths)
        self.sentence_size = self.conv.output_size  # W*F

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = self.embedding(ids)  # [B, T, D]
        if self.static_embedding is not None:
            # Multichannel (§2): each filter sees both channels and the two results are added. A
            # convolution is linear, so w*x1 + w*x2 + b = w*(x1 + x2) + b: one convolution of the summed
            # channels is exactly that, at half the cost; each channel still gets its own gradient path
            # (the static one is frozen).
            x = x + self.static_embedding(ids)  # [B, T, D]
        if self.context_dim:  # the frozen features are channels of each word beside its embedding
            x = torch.cat([x, features.context], dim=-1)  # [B, T, D] -> [B, T, D+E]
        return EncoderOutput(sentence=self.conv(x, mask))  # [B, W*F]
