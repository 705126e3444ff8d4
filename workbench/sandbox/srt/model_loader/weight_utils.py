"""The default weight loader (mirrors SGLang 0.5.23, srt/model_loader/weight_utils.py
`default_weight_loader`, lines 1574-1586): a checkpoint tensor is copied into a parameter only
when the shapes agree; otherwise a bare `assert` fails with SGLang's message, which kills the
scheduler while it loads (the server exits)."""

from __future__ import annotations

import torch


def default_weight_loader(param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
    """Copy ``loaded_weight`` into ``param`` (converted to the parameter's dtype).

    Scalars broadcast (both with one element: ``fill_``). Otherwise raises ``AssertionError``
    "Attempted to load weight (torch.Size([...])) into parameter (torch.Size([...]))" when the
    shapes differ (SGLang 0.5.23 weight_utils.py:1582-1585, the same text)."""
    if param.numel() == 1 and loaded_weight.numel() == 1:
        # Sometimes scalar values aren't considered tensors with shapes
        # so if both param and loaded_weight are a scalar,
        # "broadcast" instead of copy
        param.data.fill_(loaded_weight.item())
    else:
        assert param.size() == loaded_weight.size(), (
            f"Attempted to load weight ({loaded_weight.size()}) "
            f"into parameter ({param.size()})"
        )
        param.data.copy_(loaded_weight)
