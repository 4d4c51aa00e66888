"""Text generation on one step-with-cache interface shared by RNN and Transformer decoders."""

from textnn.generation.sampling import filter_logits, sample

__all__ = ["filter_logits", "sample"]
