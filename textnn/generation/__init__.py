"""Text generation on one step-with-cache interface shared by RNN and Transformer decoders."""

from textnn.generation.lm import Generation, generate_text
from textnn.generation.sampling import filter_logits, sample

__all__ = ["Generation", "filter_logits", "generate_text", "sample"]
