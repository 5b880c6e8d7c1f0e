"""A Qwen3 model's configuration: what ``config.json`` says, checked, and the published shapes
of the named sizes (for checkpoints with random weights of a real model's size).

Imports only ``errors`` and the standard library."""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from ...errors import ArgumentError


@dataclass(frozen=True)
class Qwen3Config:
    """The shapes and constants of a Qwen3 model (the fields of its ``config.json`` that the
    computation uses)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool)
                                       or value <= 0):
                raise ArgumentError(f"Qwen3 config: {f.name} must be a positive int, got "
                                    f"{value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ArgumentError(f"Qwen3 config: num_attention_heads ({self.num_attention_heads})"
                                f" is not a multiple of num_key_value_heads "
                                f"({self.num_key_value_heads})")

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    def parameter_count(self) -> int:
        """The number of weights (the embedding once when the head is tied to it)."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_key_value_heads * d
        layer = h * q + 2 * h * kv + q * h + 2 * d + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "config") -> "Qwen3Config":
        """From the fields of a Hugging Face ``config.json`` (``model_type`` ``qwen3``; the RoPE
        base as ``rope_theta`` or inside ``rope_parameters``)."""
        model_type = data.get("model_type")
        if model_type not in (None, "qwen3"):
            raise ArgumentError(f"{source}: model_type is {model_type!r}; this engine runs "
                                "Qwen3 models (model_type 'qwen3') only")
        rope = data.get("rope_parameters") or {}
        scaling = data.get("rope_scaling") or rope.get("rope_type", "default")
        if isinstance(scaling, Mapping):  # ({"rope_type": "default"} is plain RoPE too)
            scaling = scaling.get("rope_type", scaling.get("type", "default")) \
                if set(scaling) <= {"rope_type", "type", "rope_theta"} else scaling
        if scaling not in (None, "default"):
            raise ArgumentError(f"{source}: RoPE scaling {scaling!r} is not supported (plain "
                                "RoPE only)")
        activation = data.get("hidden_act", "silu")
        if activation != "silu":
            raise ArgumentError(f"{source}: hidden_act is {activation!r}; Qwen3's MLP is SwiGLU "
                                "(hidden_act 'silu'), the only activation this engine runs")
        if data.get("attention_bias"):
            raise ArgumentError(f"{source}: attention_bias is true; Qwen3 has no attention "
                                "bias and this engine does not support one")
        if data.get("use_sliding_window"):
            raise ArgumentError(f"{source}: sliding-window attention is not supported")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "rope_theta":
                theta = data.get("rope_theta", rope.get("rope_theta"))
                if theta is not None:
                    values[f.name] = float(theta)
            elif f.name == "head_dim" and data.get("head_dim") is None:
                values[f.name] = int(data["hidden_size"]) // int(data["num_attention_heads"])
            elif f.name in data and data[f.name] is not None:
                values[f.name] = data[f.name]
        missing = [f.name for f in fields(cls) if f.name not in values and f.default is MISSING]
        if missing:
            raise ArgumentError(f"{source}: missing {', '.join(missing)}")
        return cls(**values)

    @classmethod
    def from_dir(cls, directory: "str | Path") -> "Qwen3Config":
        """From ``directory/config.json`` (ArgumentError naming the file if it is missing)."""
        path = Path(directory) / "config.json"
        if not path.is_file():
            raise ArgumentError(f"{path}: no such file; a model directory holds config.json "
                                "and *.safetensors (Hugging Face format)")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ArgumentError(f"{path}: not valid JSON ({err})") from None
        return cls.from_dict(data, source=str(path))

    def to_json_dict(self) -> dict:
        """The ``config.json`` of a checkpoint with this configuration (Hugging Face's field
        names, readable by transformers)."""
        out = asdict(self)
        out.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
                   attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
                   rope_scaling=None, torch_dtype="bfloat16")
        if self.vocab_size > 151645:  # Qwen3's own tokens (<|endoftext|>, <|im_end|>)
            out.update(bos_token_id=151643, eos_token_id=151645)
        return out


#: The published shapes of Qwen3's dense models (their config.json files).
NAMED_CONFIGS: dict[str, Qwen3Config] = {
    "qwen3-0.6b": Qwen3Config(151936, 1024, 3072, 28, 16, 8, 128, tie_word_embeddings=True),
    "qwen3-1.7b": Qwen3Config(151936, 2048, 6144, 28, 16, 8, 128, tie_word_embeddings=True),
    "qwen3-4b": Qwen3Config(151936, 2560, 9728, 36, 32, 8, 128, tie_word_embeddings=True),
    "qwen3-8b": Qwen3Config(151936, 4096, 12288, 36, 32, 8, 128),
    "qwen3-14b": Qwen3Config(151936, 5120, 17408, 40, 40, 8, 128),
    "qwen3-32b": Qwen3Config(151936, 5120, 25600, 64, 64, 8, 128),
}


def named(name: str) -> Qwen3Config:
    """The configuration of a named size (``qwen3-4b``...; ArgumentError listing them)."""
    found = NAMED_CONFIGS.get(name.lower())
    if found is None:
        raise ArgumentError(f"unknown model size {name!r}",
                            hint="one of " + ", ".join(NAMED_CONFIGS))
    return found
