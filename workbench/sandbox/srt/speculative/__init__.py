"""Mirror of SGLang 0.5.23 `sglang.srt` package layout (sandbox implementation)."""
