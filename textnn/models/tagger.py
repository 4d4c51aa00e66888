"""Recurrent sequence tagger: word (+ character, + casing) features -> BiLSTM/GRU/RNN -> per-token tag
scores -> softmax or a linear-chain CRF.

Lample, Ballesteros, Subramanian, Kawakami & Dyer (2016), "Neural Architectures for Named Entity
Recognition", NAACL: §2.1 a bidirectional LSTM reads the sentence and its two states at each word
are concatenated; §2.2 the per-word tag scores P feed a CRF with learned transition scores (see
`modules.crf`); §4.1 each word is its pretrained embedding concatenated with a character BiLSTM
representation (`modules.char_encoders.CharLSTM`); §4.3 dropout on that concatenation (0.5, §5.1).
Ma & Hovy (2016), "End-to-end Sequence Labeling via Bi-directional LSTM-CNNs-CRF", ACL: the same
architecture with a character CNN (`CharCNN`) and dropout on both the input and the output of the
BiLSTM (Figures 1-2, Table 1). Both are presets below; `head.output: softmax` gives the BiLSTM-softmax baseline.

As an encoder: ids [B, T] (word ids), mask [B, T] bool (True = real token) and features (chars
[B, T, C], 0 = padding; casing [B, T], 0 = padding) -> tokens [B, T, 2H], the dropped BiRNN states.
The tag scores and the softmax or CRF output are the tagging task's head (`modules.heads.TaggerHead`,
`head.output`, `head.constrained`).
With `spec.context_dim` > 0 the features also carry context [B, T, E], a frozen encoder's layers per
word (the tagging task's data.features_from; Devlin et al. 2019 §5.3's feature-based BERT), which are
concatenated to the word representation before the dropout and the BiRNN.
"""

# B batch, T words per sentence, C characters per word, D word dim, F char features, A casing dim,
# H hidden size per direction, K tags

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import ModelOptions, Preset, PresetHead, opt
from textnn.models.base import Encoder, EncoderOutput, InputSpec, TokenFeatures, require_choice, require_ints
from textnn.models.word_features import add_word_features, check_word_feature_options, concat_word_features
from textnn.modules.dropout import Dropout
from textnn.modules.rnn import CELLS, RNNEncoder



@dataclass
class RNNTaggerConfig(ModelOptions):
    word_dim: int = opt(100, "word embedding size D (must match data.vectors when given)")
    char_encoder: str = opt("lstm", "character features of each word: none, cnn (Ma & Hovy 2016) or lstm (Lample et al. 2016)")
    char_dim: int = opt(25, "character embedding size (cnn or lstm)")
    char_filters: int = opt(30, "char_encoder cnn: number of filters, i.e. character features per word")
    char_width: int = opt(3, "char_encoder cnn: filter width in characters")
    char_hidden: int = opt(25, "char_encoder lstm: hidden size per direction (2 x this many features per word)")
    casing_dim: int = opt(0, "size of a learned embedding of each word's casing category; 0 = no casing feature")
    cell: str = opt("lstm", "recurrent cell of the sentence-level BiRNN: lstm, gru or rnn (Elman, tanh)")
    hidden_size: int = opt(100, "hidden size H of each direction of the BiRNN")
    num_layers: int = opt(1, "stacked BiRNN layers")
    dropout: float = opt(0.5, "dropout on the word representations entering the BiRNN, between its layers, on its "
                              "output, and on the character embeddings before a char CNN, in [0, 1)", retunable=True)
    freeze_embeddings: bool = opt(False, "keep the (pretrained) word embeddings fixed during training")

    def __post_init__(self) -> None:
        check_word_feature_options(self)
        require_ints(self, "hidden_size", "num_layers")
        require_choice(self, "cell", CELLS, one_of=True)


class RNNTagger(Encoder):
    """[word; char features; casing] -> dropout -> BiRNN -> dropout: the states the tag scores read."""

    config_class = RNNTaggerConfig
    gives_tokens = True
    reads = ("chars", "casing")
    uses_vectors = True
    takes_context = True  # a frozen encoder's features join the word representation (data.features_from)

    def __init__(self, cfg: RNNTaggerConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        features = add_word_features(self, cfg, spec) + spec.context_dim
        self.context_dim = spec.context_dim
        self.dropout = Dropout(cfg.dropout)
        self.rnn = RNNEncoder(features, cfg.hidden_size, cfg.cell, cfg.num_layers, bidirectional=True,
                                  dropout=cfg.dropout)
        self.token_size = self.rnn.output_size  # 2H

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = concat_word_features(self.word_embedding, self.char_encoder, self.casing_embedding, ids,
                                 features)  # [B, T, D+F+A]
        if self.context_dim:
            x = torch.cat([x, features.context], dim=-1)  # [B, T, D+F+A] -> [B, T, D+F+A+E]
        x = self.dropout(x)
        return EncoderOutput(tokens=self.dropout(self.rnn(x, mask)))  # [B, T, 2H]


PRESETS: dict[str, Preset] = {
    # For tests: every part present (char BiLSTM, casing, CRF with constraints) and still tiny.
    "tiny": Preset(
        RNNTaggerConfig(word_dim=8, char_encoder="lstm", char_dim=4, char_filters=5, char_width=3,
                        char_hidden=3, casing_dim=2, cell="lstm", hidden_size=6, num_layers=1, dropout=0.1),
        PresetHead(output="crf", constrained=True)),
    # Lample et al. (2016) LSTM-CRF: §4.1-4.2 100-d pretrained word embeddings and a character BiLSTM of
    # 25 units per direction on 25-d character embeddings; §5.1 a one-layer word BiLSTM of 100 units per
    # direction and dropout 0.5; §2.2 a CRF with freely learned transitions (hence constrained: false).
    "paper": Preset(
        RNNTaggerConfig(word_dim=100, char_encoder="lstm", char_dim=25, char_hidden=25, casing_dim=0,
                        cell="lstm", hidden_size=100, num_layers=1, dropout=0.5),
        PresetHead(output="crf", constrained=False)),
    # Ma & Hovy (2016) BLSTM-CNN-CRF, Table 1: 100-d GloVe, character CNN with 30 filters of width 3 on
    # 30-d character embeddings, LSTM of 200 units per direction, dropout 0.5; CRF with learned transitions.
    "ma_hovy": Preset(
        RNNTaggerConfig(word_dim=100, char_encoder="cnn", char_dim=30, char_filters=30, char_width=3,
                        casing_dim=0, cell="lstm", hidden_size=200, num_layers=1, dropout=0.5),
        PresetHead(output="crf", constrained=False)),
}

RNNTagger.presets = PRESETS
