"""Text generation on one decoding interface shared by RNN, Transformer and encoder-decoder models."""

from textnn.generation.decoding import (SEARCHES, Decoder, DecodingConfig, Hypothesis, PromptDecoder, Search,
                                        beam_search, decode, greedy, length_penalty, sample)
from textnn.generation.lm import Generation, generate_text
from textnn.generation.sampling import filter_logits

__all__ = ["SEARCHES", "Decoder", "DecodingConfig", "Generation", "Hypothesis", "PromptDecoder", "Search", "beam_search",
           "decode", "filter_logits", "generate_text", "greedy", "length_penalty", "sample"]
