"""ctypes declarations of include/ingot/model.h shared by the model tests
(one set: ctypes rejects a structure of another class than the argtypes
name, so every test module must use these)."""
import ctypes

from ingot_ctypes import Device, lib

P, I64, I32, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float


class SampleOpts(ctypes.Structure):
    _fields_ = [("temperature", F), ("top_k", ctypes.c_int), ("top_p", F),
                ("repeat_penalty", F), ("repeat_last_n", ctypes.c_int), ("seed", ctypes.c_uint64)]


class GenOpts(ctypes.Structure):
    _fields_ = [("max_tokens", I64), ("sample", SampleOpts), ("stop_at_eos", ctypes.c_bool)]


class GenStats(ctypes.Structure):
    _fields_ = [("prompt_tokens", I64), ("generated_tokens", I64), ("prompt_seconds", ctypes.c_double),
                ("decode_seconds", ctypes.c_double), ("prompt_tps", ctypes.c_double),
                ("decode_tps", ctypes.c_double)]


class ModelConfig(ctypes.Structure):
    """ingot_model_config."""
    _fields_ = [("arch", ctypes.c_int), ("arch_name", ctypes.c_char * 32), ("n_layers", I32),
                ("dim", I32), ("ffn_dim", I32), ("n_heads", I32), ("n_kv_heads", I32),
                ("head_dim", I32), ("vocab", I32), ("ctx_train", I64), ("ctx", I64),
                ("rms_eps", F), ("rope_base", F), ("rope_neox", ctypes.c_bool),
                ("rope_scaling", ctypes.c_int), ("rope_factor", F), ("rope_low_freq_factor", F),
                ("rope_high_freq_factor", F), ("rope_orig_ctx", I64), ("qk_norm", ctypes.c_bool),
                ("tied_embeddings", ctypes.c_bool), ("n_experts", I32), ("n_experts_used", I32),
                ("expert_ffn_dim", I32), ("shared_expert_ffn_dim", I32),
                ("norm_topk_prob", ctypes.c_bool)]


TOKEN_FN = ctypes.CFUNCTYPE(ctypes.c_int, I32, ctypes.c_char_p, ctypes.c_size_t, P)

for _fn, _res, _args in [
    ("ingot_model_load", P, [ctypes.c_char_p, Device]),
    ("ingot_model_free", None, [P]),
    ("ingot_model_random", P, [ctypes.POINTER(ModelConfig), ctypes.c_int, ctypes.c_uint64, Device]),
    ("ingot_model_get_config", ctypes.POINTER(ModelConfig), [P]),
    ("ingot_model_layer_is_moe", ctypes.c_bool, [P, ctypes.c_int]),
    ("ingot_model_reset", None, [P]),
    ("ingot_model_n_past", I64, [P]),
    ("ingot_model_truncate", ctypes.c_int, [P, I64]),
    ("ingot_model_forward", ctypes.c_int, [P, P, I64, P]),
    ("ingot_model_tokenizer", P, [P]),
    ("ingot_model_chat_template", ctypes.c_char_p, [P]),
    ("ingot_tokenize", I64, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, P, I64]),
    ("ingot_sample_defaults", SampleOpts, []),
    ("ingot_sample", I32, [ctypes.POINTER(SampleOpts), P, I64, P, I64, ctypes.c_uint64]),
    ("ingot_generate_defaults", GenOpts, []),
    ("ingot_generate", ctypes.c_int, [P, P, I64, ctypes.POINTER(GenOpts), TOKEN_FN, P, P, I64,
                                      ctypes.POINTER(I64), ctypes.POINTER(GenStats)]),
]:
    getattr(lib, _fn).restype, getattr(lib, _fn).argtypes = _res, _args


def tokenize(m, text, special=False):
    """Token ids (int32) of text with model m's tokenizer."""
    import numpy as np
    b = text.encode()
    ids = np.zeros(len(b) + 16, np.int32)
    n = lib.ingot_tokenize(lib.ingot_model_tokenizer(m), b, len(b), special, ids.ctypes.data,
                           len(ids))
    assert 0 < n <= len(ids), lib.ingot_last_error().decode()
    return ids[:n].copy()


def forward_logits(m, ids, vocab):
    """ingot_model_forward of ids on m (continuing its cache): the last
    token's logits, float32 [vocab]."""
    import numpy as np
    ids = np.ascontiguousarray(ids, np.int32)
    out = np.zeros(vocab, np.float32)
    st = lib.ingot_model_forward(m, ids.ctypes.data, len(ids), out.ctypes.data)
    assert st == 0, lib.ingot_last_error().decode()
    return out


class ModelHandle:
    """A loaded ingot_model (self.p, freed on exit) with the two probes the
    model tests use: logits of a prompt and greedy tokens."""
    vocab = 0

    def __enter__(self):
        return self

    def __exit__(self, *a):
        lib.ingot_model_free(self.p)

    def logits(self, ids, reset=True):
        import numpy as np
        if reset:
            lib.ingot_model_reset(self.p)
        return forward_logits(self.p, ids, self.vocab)

    def greedy(self, ids, n):
        import numpy as np
        lib.ingot_model_reset(self.p)
        o = lib.ingot_generate_defaults()
        o.max_tokens, o.stop_at_eos = n, False
        o.sample.temperature = 0
        ids = np.ascontiguousarray(ids, np.int32)
        out, nout = np.zeros(n, np.int32), I64()
        st = lib.ingot_generate(self.p, ids.ctypes.data, len(ids), ctypes.byref(o),
                                TOKEN_FN(lambda *a: 0), None, out.ctypes.data, n,
                                ctypes.byref(nout), None)
        assert st == 0, lib.ingot_last_error().decode()
        return list(out[:nout.value])
