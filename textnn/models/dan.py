"""Deep Averaging Network (Iyyer, Manjunatha, Boyd-Graber and Daumé III, 2015, "Deep Unordered
Composition Rivals Syntactic Methods for Text Classification", ACL).

§3: average the word embeddings of a sentence, pass the average through k feed-forward layers, and
classify the last one with a softmax layer (the task's head). §3.1 word dropout: during training each
token is dropped before averaging (see `masking.word_dropout_mask`), which the paper finds more useful
than dropout on hidden units. With k = 0 the model is the neural bag of words (NBOW) baseline of §4.
"""

# B batch, T sequence length, D embedding dim, H hidden dim

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, opt
from textnn.models.base import Encoder, EncoderOutput, InputSpec, TokenFeatures, require_choice, require_ints
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.masking import word_dropout_mask
from textnn.modules.pooling import masked_mean

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


@dataclass
class DANConfig(ModelOptions):
    embedding_dim: int = opt(300, "word embedding size D (must match data.vectors when given)")
    hidden_dim: int = opt(300, "size H of each feed-forward layer")
    num_layers: int = opt(3, "feed-forward layers k on the average (0 = NBOW: classify the average)")
    word_dropout: float = opt(0.3, "probability of dropping each input token during training, in [0, 1)", retunable=True)
    activation: str = opt("relu", "nonlinearity of the feed-forward layers: relu or tanh")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        require_ints(self, "embedding_dim", "hidden_dim")
        require_ints(self, "num_layers", at_least=0)
        _check(isinstance(self.word_dropout, (int, float)) and 0.0 <= self.word_dropout < 1.0, "word_dropout",
               self.word_dropout, "a probability in [0, 1)")
        require_choice(self, "activation", ACTIVATIONS, one_of=True)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(DANConfig(embedding_dim=8, hidden_dim=8, num_layers=2, word_dropout=0.3)),
    # Iyyer et al. 2015 §4 (sentiment experiments: RT, SST, IMDB): 300-d GloVe embeddings fine-tuned,
    # three 300-d ReLU layers, word-dropout rate 0.3 (the best rate in their dropout study, §5);
    # the same values are the defaults of the authors' code (github.com/miyyer/dan, dan_sentiment.py:
    # -d 300 -dh 300 -deep 3 -drop 0.3, f=relu; trained with AdaGrad lr 0.005, L2 1e-4).
    "paper": Preset(
        DANConfig(embedding_dim=300, hidden_dim=300, num_layers=3, word_dropout=0.3, activation="relu",
                  freeze_embeddings=False)),
}


class DAN(Encoder):
    """Average of (word-dropped) embeddings -> k layers (`activation`): the sentence vector."""

    config_class = DANConfig
    presets = PRESETS
    gives_sentence = True
    uses_vectors = True

    def __init__(self, cfg: DANConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id, spec.pretrained,
                                        cfg.freeze_embeddings)
        sizes = [cfg.embedding_dim] + [cfg.hidden_dim] * cfg.num_layers
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(n_in, n_out), ACTIVATIONS[cfg.activation]()]
        self.layers = nn.Sequential(*layers)
        self.sentence_size = sizes[-1]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        if self.training:
            mask = word_dropout_mask(mask, self.cfg.word_dropout)  # §3.1; off in eval
        avg = masked_mean(self.embedding(ids), mask)  # [B, T, D] -> [B, D]
        return EncoderOutput(sentence=self.layers(avg))  # [B, H] (or [B, D] when num_layers = 0)

    def layer_groups(self):
        linears = [m for m in self.layers if isinstance(m, nn.Linear)]
        return [("embedding", [self.embedding]), *((f"layer{i}", [m]) for i, m in enumerate(linears))]
