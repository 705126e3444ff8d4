"""Prometheus metrics of the sandbox server (SGLang 0.5.23: srt/observability/)."""
