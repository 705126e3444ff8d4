"""Target model wrapper for the sandbox box: a transformers `LlamaForCausalLM` with EAGLE-3
auxiliary hidden-state capture.

Mirrors SGLang 0.5.23, srt/models/llama.py: `set_eagle3_layers_to_capture(layer_ids)` with the
llama offset rule (None -> `[2, L//2, L-3]`; explicit ids -> `[id + 1 for id in ids]`), the
capture taken at the INPUT of decoder layer k (= the output of layer k-1, residual included),
and with capture off the draft receives the final hidden state after the norm (what SGLang's
logits processor hands to the EAGLE worker).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn


class LlamaForCausalLM(nn.Module):
    """Wraps `transformers.LlamaForCausalLM` (fp32, CPU).

    `forward(input_ids [1,T], positions [1,T], cache)` returns
    `(logits [1,T,vocab], hidden [1,T,width])` where width = hidden_size (final state after the
    norm) without capture, or `len(layers_to_capture) * hidden_size` (concatenated aux states)
    with capture on.
    """

    def __init__(self, hf_model) -> None:
        super().__init__()
        self.hf_model = hf_model
        self.config = hf_model.config
        self.capture_aux_hidden_states = False
        self.layers_to_capture: List[int] = []
        self._captured: dict = {}
        self._final_hidden: Optional[torch.Tensor] = None
        layers = hf_model.model.layers
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(self._make_capture_hook(i), with_kwargs=True)
        hf_model.model.norm.register_forward_hook(self._norm_hook)

    @classmethod
    def from_pretrained(cls, path: str) -> "LlamaForCausalLM":
        """Load a HF Llama directory (config.json + model.safetensors) in fp32, eval mode."""
        from transformers import LlamaForCausalLM as HFLlama
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a tqdm bar on stderr would break SGLang's log format

        hf_model = HFLlama.from_pretrained(path, dtype=torch.float32)
        hf_model.eval()
        return cls(hf_model)

    # -- capture -------------------------------------------------------------------------------
    def _make_capture_hook(self, layer_index: int):
        def hook(module, args, kwargs):
            # >>> eagle-workbench probe target-capture-layers >>>
            try:
                import sys as _ewb_sys, builtins as _ewb_b
                _ewb_fired = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_fired', _ewb_b.set())
                if 'target-capture-layers' not in _ewb_fired:
                    _ewb_g = _ewb_sys.__dict__.get('_eagle_workbench_probe_gate_2')
                    if _ewb_g is None:
                        import types as _ewb_t
                        def _ewb_gf(fn, name, _b=_ewb_b, _s=_ewb_sys):
                            if name.startswith('torch.'):
                                want = _s.modules.get('torch')
                                for part in name.split('.')[1:]:
                                    want = _b.getattr(want, part, None)
                            else:
                                want = _b.getattr(_b, name, None)
                            if want is None or fn is not want:
                                raise _b.TypeError('probe: %s here is %r, not the function of that name; not called' % (name, fn))
                            return _ewb_gr if name == 'range' else fn
                        def _ewb_gm(obj, name, _b=_ewb_b, _s=_ewb_sys, _ok=('buffers', 'children', 'modules', 'named_buffers', 'named_children', 'named_modules', 'named_parameters', 'parameters')):
                            _t = _s.modules.get('torch')
                            if _t is not None and _b.isinstance(obj, _t.nn.Module) and name not in _ok:
                                raise _b.TypeError('probe: .%s() would change the module in place; not called' % name)
                            return _b.getattr(obj, name)
                        def _ewb_git(value, _b=_ewb_b):
                            if _b.hasattr(_b.type(value), '__next__'):
                                raise _b.TypeError('probe: %s is an iterator; iterating it would consume it' % _b.type(value).__name__)
                            return value
                        import threading as _ewb_th, re as _ewb_re, operator as _ewb_op
                        _ewb_pc, _ewb_sp = _ewb_re.compile('%%|%(?:\\([^)]*\\))?[-#0 +]*(\\*|\\d+)?(?:\\.(\\*|\\d*))?'), _ewb_re.compile('(\\d+)')
                        def _ewb_fr(fmt, percent, _b=_ewb_b, _pc=_ewb_pc, _sp=_ewb_sp):
                            fmt = fmt.decode('latin-1') if _b.isinstance(fmt, _b.bytes) else fmt
                            for m in (_pc if percent else _sp).finditer(fmt):
                                for g in m.groups():
                                    if g == '*':
                                        return 'a % format with a * width or precision'
                                    if g and _b.int(g) > 10000:
                                        return 'a format width or precision of %s (at most 10000)' % g
                            return None
                        _ewb_tl = _ewb_th.local()
                        def _ewb_gz(_tl=_ewb_tl):
                            _tl.n = 0
                        def _ewb_glp(it, _b=_ewb_b, _tl=_ewb_tl):
                            for v in it:
                                _tl.n = _b.getattr(_tl, 'n', 0) + 1
                                if _tl.n > 100000:
                                    raise _b.ValueError('probe: comprehensions of one expression ran over 100000 steps; stopped')
                                yield v
                        def _ewb_gb(op, a, b, _b=_ewb_b, _fr=_ewb_fr, _op=_ewb_op):
                            _int = _b.isinstance(a, _b.int) and _b.isinstance(b, _b.int)
                            if op == 'pow':
                                if _int and (_b.abs(b) > 256 or a.bit_length() * _b.abs(b) > 4096):
                                    raise _b.ValueError('probe: a %d-bit int ** %d is refused (exponent at most 256, result at most 4096 bits)' % (a.bit_length(), b))
                                return a ** b
                            if op == 'lshift':
                                if _int and b > 4096:
                                    raise _b.ValueError('probe: an int << %d is refused (shift at most 4096)' % b)
                                return a << b
                            if op == 'mod':
                                if _b.isinstance(a, (_b.str, _b.bytes)):
                                    why = _fr(a, True)
                                    if why:
                                        raise _b.ValueError('probe: %s is refused' % why)
                                return a % b
                            for s, n in ((a, b), (b, a)):  # n: an int or what repetition takes for one (__index__)
                                if _b.isinstance(s, (_b.str, _b.bytes, _b.bytearray, _b.list, _b.tuple)):
                                    try:
                                        k = _op.index(n)
                                    except _b.TypeError:  # not a count (a float, a tensor of many values): not a repetition
                                        continue
                                    if _b.len(s) * k > 10000:
                                        raise _b.ValueError('probe: a %s of length %d * %d is refused (result length at most 10000)' % (_b.type(s).__name__, _b.len(s), k))
                            return a * b
                        def _ewb_gr(*args, _b=_ewb_b):
                            r = _b.range(*args)
                            try:
                                n = _b.len(r)
                            except _b.OverflowError:
                                n = None
                            if n is None or n > 10000:
                                raise _b.ValueError('probe: %r is refused (a range of at most 10000 items)' % (r,))
                            return r
                        _ewb_g = _ewb_t.SimpleNamespace(f=_ewb_gf, m=_ewb_gm, it=_ewb_git, b=_ewb_gb, lp=_ewb_glp, z=_ewb_gz)
                        _ewb_sys.__dict__['_eagle_workbench_probe_gate_2'] = _ewb_g
                    _ewb_fired.add('target-capture-layers')
                    _ewb_parts = []
                    _ewb_cut = lambda s: s if _ewb_b.len(s) <= 2000 else s[:2000] + '...'
                    try:
                        _ewb_g.z()
                        _ewb_parts.append('self.layers_to_capture=' + _ewb_cut(_ewb_b.repr((self.layers_to_capture))))
                    except Exception as _ewb_exc:
                        _ewb_parts.append('self.layers_to_capture=<error:' + _ewb_b.repr(_ewb_exc) + '>')
                    try:
                        _ewb_g.z()
                        _ewb_parts.append("(self.capture_aux_hidden_states if hasattr(self, 'capture_aux_hidden_states') else None)=" + _ewb_cut(_ewb_b.repr((self.capture_aux_hidden_states if _ewb_g.f(hasattr, 'hasattr')(self, 'capture_aux_hidden_states') else None))))
                    except Exception as _ewb_exc:
                        _ewb_parts.append("(self.capture_aux_hidden_states if hasattr(self, 'capture_aux_hidden_states') else None)=<error:" + _ewb_b.repr(_ewb_exc) + '>')
                    try:
                        import os as _ewb_os
                        _ewb_who = ' pgid=%d pid=%d' % (_ewb_os.getpgrp(), _ewb_os.getpid())
                    except Exception:  # not POSIX: the line is still printed, its launch unknown
                        _ewb_who = ' pgid=? pid=?'
                    _ewb_b.print('[probe:target-capture-layers]'[:-1] + _ewb_who + '] ' + ' '.join(_ewb_parts).replace('\n', '\\n'), file=_ewb_sys.stderr, flush=True)
            except Exception as _ewb_exc:  # a probe must never break the code it watches
                try:
                    import sys as _ewb_sys, builtins as _ewb_b
                    _ewb_failed = _ewb_sys.__dict__.setdefault('_eagle_workbench_probes_failed', _ewb_b.set())
                    if 'target-capture-layers' not in _ewb_failed:
                        _ewb_failed.add('target-capture-layers')
                        try:
                            import os as _ewb_os
                            _ewb_who = ' pgid=%d pid=%d' % (_ewb_os.getpgrp(), _ewb_os.getpid())
                        except Exception:  # not POSIX: the line is still printed, its launch unknown
                            _ewb_who = ' pgid=? pid=?'
                        _ewb_b.print('[probe:target-capture-layers]'[:-1] + _ewb_who + '] <probe failed:' + _ewb_b.repr(_ewb_exc)[:2000] + '>', file=_ewb_sys.stderr, flush=True)
                except Exception as _ewb_lost:  # stderr cannot be written: nowhere left to say it but here
                    __import__('sys').__dict__.setdefault('_eagle_workbench_probes_lost', {})['target-capture-layers'] = __import__('builtins').repr(_ewb_lost)
            # <<< eagle-workbench probe target-capture-layers <<<
            if self.capture_aux_hidden_states and layer_index in self.layers_to_capture:
                hidden = args[0] if args else kwargs["hidden_states"]
                self._captured[layer_index] = hidden
            return None

        return hook

    def _norm_hook(self, module, args, output):
        self._final_hidden = output
        return None

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None) -> None:
        """Turn on aux capture (SGLang 0.5.23, srt/models/llama.py).

        None -> layers `[2, L//2, L-3]`; explicit ids -> `[id + 1 for id in ids]` (capture at
        the input of layer id+1, i.e. the output of layer id).
        """
        num_layers = self.config.num_hidden_layers
        if layer_ids is None:
            self.capture_aux_hidden_states = True
            self.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
            # we plus 1 here because in SGLang, for the ith layer, it takes the output
            # of the (i-1)th layer as aux hidden state
            self.layers_to_capture = [val + 1 for val in layer_ids]

    # -- embedding / head sharing ---------------------------------------------------------------
    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(embedding [vocab, H], lm_head [vocab, H]) shared with the draft."""
        return self.hf_model.model.embed_tokens.weight, self.hf_model.lm_head.weight

    def get_embed(self) -> torch.Tensor:
        """Embedding table [vocab, H]."""
        return self.hf_model.model.embed_tokens.weight

    # -- forward --------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache) -> Tuple[torch.Tensor, torch.Tensor]:
        self._captured = {}
        self._final_hidden = None
        out = self.hf_model(input_ids=input_ids, position_ids=positions, cache=cache, use_cache=True)
        logits = out.logits
        if self.capture_aux_hidden_states:
            # SGLang walks the layers in order and captures once per layer listed in
            # layers_to_capture (AuxHiddenStateList): order = layer order, duplicates collapse.
            aux = [self._captured[i] for i in sorted(self._captured)]
            hidden = torch.cat(aux, dim=-1)
        else:
            hidden = self._final_hidden
        return logits, hidden


EntryClass = [LlamaForCausalLM]
