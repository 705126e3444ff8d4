"""Mirror of SGLang 0.5.23 `sglang.srt.model_loader` (sandbox implementation): the model class an
architecture name resolves to (`utils.py`) and the weight loader's shape check (`weight_utils.py`)."""
