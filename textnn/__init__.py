"""textnn: neural networks for text, from bag-of-words to Transformer-XL."""

__version__ = "0.1.0"
