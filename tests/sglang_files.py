"""The real SGLang 0.5.23 files the probe tests patch, and a runner for the real
``_resolve_eagle_aux_hidden_state`` (SGLang cannot run here: no GPU, so the function is lifted out
of its module and given stand-ins for the SGLang objects it reads)."""

import textwrap

DRAFT_REL = "srt/models/llama_eagle3.py"
AUX_REL = "srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
WIDTH_CHECK = "if hidden_states.shape[-1] != embeds.shape[-1]:"
GATE = "if spec_algorithm.is_eagle3():"

#: Runs the real ``_resolve_eagle_aux_hidden_state`` of a (probed) spec_aux_hidden_state.py, lifted
#: out of its module with its own line numbers, with stand-ins for what it reads from SGLang.
RUN_AUX_GATE = textwrap.dedent(
    """\
    import __future__, ast, sys
    path, algo = sys.argv[1], sys.argv[2]
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_resolve_eagle_aux_hidden_state")
    code = compile(ast.Module(body=[fn], type_ignores=[]), path, "exec", flags=__future__.annotations.compiler_flag)

    class NS:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class Algo:
        def __init__(self, name):
            self.name = name
        def is_eagle(self):
            return self.name in ("EAGLE", "EAGLE3")
        def is_standalone(self):
            return False
        def is_eagle3(self):
            return self.name == "EAGLE3"
        def __repr__(self):
            return "SpeculativeAlgorithm." + self.name

    class ModelConfig:
        @staticmethod
        def from_server_args(server_args, **kw):
            return NS(num_nextn_predict_layers=None, num_hidden_layers=1, num_attention_layers=1,
                      is_hybrid_swa=False, is_deepseek_v4_arch=False,
                      hf_config=NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}))

    spec = NS(speculative_draft_model_path="/models/draft", speculative_draft_model_revision=None)
    g = {"__name__": "aux_gate", "get_spec": lambda: spec, "ModelConfig": ModelConfig}
    exec(code, g)
    config = NS(draft_kv_num_layers=None, eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None)
    g["_resolve_eagle_aux_hidden_state"](config=config, server_args=NS(), model_config=NS(), spec_algorithm=Algo(algo),
                                         is_draft_worker=False)
    print(config.eagle_use_aux_hidden_state, config.eagle_aux_hidden_state_layer_ids)
    """
)
