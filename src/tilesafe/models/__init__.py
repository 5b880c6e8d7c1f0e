"""tilesafe.models: language models built only on the safe kernel library (``tilesafe.kernels``).

``checkpoint`` reads and writes Hugging Face-format checkpoint directories (``config.json``
plus ``*.safetensors``, sharded with an index); ``qwen3`` holds the Qwen3 architecture: its
configuration (and the published shapes of the named sizes).

Layer: above ``kernels``; needs the ``models`` extra (safetensors, tokenizers, tqdm) at use.
"""
