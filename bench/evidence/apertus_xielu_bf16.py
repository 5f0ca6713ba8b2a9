"""Evidence for the vllm-archs Apertus findings (docs/ARCHITECTURES.md).

    .venv-vllm/bin/python bench/evidence/apertus_xielu_bf16.py ~/.cache/harness/models/tiny/ApertusForCausalLM-<key>

vLLM's apertus.py:109 builds XIELU() with its default dtype bfloat16 (layers/activation.py:695)
whatever the model's dtype; transformers builds it in config.dtype. In transformers' own
float32 model this script (1) rounds the activation's alpha_p, alpha_n, beta and eps to
bf16, as vLLM holds them, and compares with the float32 model (the hf golden check's
disagreement), and (2) compares that bf16-parameter activation run eagerly (softplus in
bf16) with the same under torch.compile (inductor computes the softplus in float32):
the disagreement of vLLM's compile settings with its own eager golden.
"""

import sys

import torch
from transformers import AutoModelForCausalLM


def bf16_activation_params(model) -> None:
    for layer in model.model.layers:
        act = layer.mlp.act_fn
        for name in ("alpha_p", "alpha_n"):
            getattr(act, name).data = getattr(act, name).data.to(torch.bfloat16)
        act.beta = act.beta.to(torch.bfloat16)
        act.eps = act.eps.to(torch.bfloat16)


def logprobs(model, ids) -> torch.Tensor:
    return torch.log_softmax(model(ids).logits.float(), -1)


def main(checkpoint: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = torch.randint(3, 500, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        as_transformers = logprobs(model, ids)
        bf16_activation_params(model)
        as_vllm_eager = logprobs(model, ids)
        as_vllm_compiled = logprobs(torch.compile(model), ids)
    print(f"float32 activation vs bf16 activation parameters (eager): {(as_transformers - as_vllm_eager).abs().max():.2e}")
    print(f"bf16 activation parameters, eager vs torch.compile:        {(as_vllm_eager - as_vllm_compiled).abs().max():.2e}")


if __name__ == "__main__":
    main(sys.argv[1])
