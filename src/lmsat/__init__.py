"""lmsat: language-model saturation and the softmax bottleneck across checkpoints."""

__version__ = "0.1.0"
