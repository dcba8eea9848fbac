"""Reference outputs from transformers itself (needs torch + transformers: the
GPU machine): a random-initialised model of a small config saved as an HF
directory, its last-position logits for a prompt and its greedy tokens.

As a script it writes such a directory for a qwen3_moe config:
  python tests/py/transformers_ref.py OUT_DIR TOKENIZER_DIR"""
import json
import shutil
import sys

import numpy as np


def transformers_reference(config_cls, model_cls, c, out_dir, tok_dir, prompt, steps):
    """Save a float32 model_cls(config_cls(**c)) with weights drawn wider than
    HF's 0.02 init (so the logits are not all ~0) into out_dir with the
    tokenizer files of tok_dir; return (logits of the last prompt position as
    float64, greedy tokens for steps steps)."""
    import torch
    import transformers
    c = {k: v for k, v in c.items() if k not in ("architectures", "model_type", "torch_dtype")}
    cfg = getattr(transformers, config_cls)(**c)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.ndim >= 2:  # linear weights (fused experts: [E, out, in])
                p.normal_(0, 1 / np.sqrt(p.shape[-1]) if "embed" not in n else 1.0)
            else:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tok_dir}/{f}", f"{out_dir}/{f}")
    ids = torch.tensor(np.asarray(prompt)[None].astype(np.int64))
    with torch.no_grad():
        want = model(ids).logits[0, -1].double().numpy()
        toks, cur = [], ids
        for _ in range(steps):
            t = int(model(cur).logits[0, -1].argmax())
            toks.append(t)
            cur = torch.cat([cur, torch.tensor([[t]])], 1)
    return want, toks


if __name__ == "__main__":
    from test_model_moe import moe_config
    out, tok = sys.argv[1], sys.argv[2]
    c = moe_config(8, 2, True, mlp_only_layers=[1])
    want, toks = transformers_reference("Qwen3MoeConfig", "Qwen3MoeForCausalLM", c, out, tok,
                                        [5, 17, 250, 3, 99, 42, 7, 180, 11], 32)
    print(json.dumps({"greedy": toks, "logits_head": [float(x) for x in want[:8]]}))
