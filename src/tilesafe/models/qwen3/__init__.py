"""The Qwen3 architecture: configuration (``config``)."""

from .config import NAMED_CONFIGS, Qwen3Config

__all__ = ["Qwen3Config", "NAMED_CONFIGS"]
