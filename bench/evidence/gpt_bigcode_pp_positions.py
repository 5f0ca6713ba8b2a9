"""Evidence for the vllm-archs gpt-bigcode tp1-pp2-compile failure (docs/ARCHITECTURES.md).

    .venv-vllm/bin/python bench/evidence/gpt_bigcode_pp_positions.py reports/RUN/scenarios/vllm-archs__arch-gpt-bigcode-tp1-pp2-compile

vLLM 0.32 serves GPTBigCodeForCausalLM with its Transformers modeling backend. Under PP
the backend keeps every module before the layer list on the last rank when the word
embeddings are tied (transformers/base.py pipeline_parallel), so PP rank 1 keeps `wpe`,
and GPTBigCodeModel.forward adds `wpe(position_ids)` to the hidden states it receives
from rank 0: the position embeddings are added twice. This script recomputes the
scenario's logits workload in transformers, once as written and once with the
position embeddings added again before layer 1, and compares both with what vLLM wrote.
"""

import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def logprobs(model, prompts, positions_twice: bool) -> torch.Tensor:
    rows = []
    for prompt in prompts:
        ids, pos = torch.tensor([prompt]), torch.arange(len(prompt))[None]
        hook = None
        if positions_twice:  # what PP rank 1 does to rank 0's hidden states

            def add_positions(module, args, kwargs, pos=pos):
                if args:
                    return (args[0] + model.transformer.wpe(pos),) + args[1:], kwargs
                return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + model.transformer.wpe(pos)}

            hook = model.transformer.h[1].register_forward_pre_hook(add_positions, with_kwargs=True)
        rows.append(torch.log_softmax(model(ids, position_ids=pos).logits[0].float(), -1))
        if hook:
            hook.remove()
    return torch.cat(rows)


def main(scenario_dir: str) -> None:
    brief = json.load(open(f"{scenario_dir}/spec.json"))
    out = load_file(f"{scenario_dir}/outputs/outputs.safetensors")
    model = AutoModelForCausalLM.from_pretrained(brief["model_dir"], dtype=torch.float32).eval()
    prompts = brief["workloads"][0]["prompts"]
    with torch.no_grad():
        for twice in (False, True):
            mine = logprobs(model, prompts, twice).gather(1, out["logits.topk_ids"].long())
            worst = (mine - out["logits.topk_logprobs"]).abs().max().item()
            print(f"position embeddings added {'twice' if twice else 'once '}: max |dlogprob| vs vLLM = {worst:.2e}")


if __name__ == "__main__":
    main(sys.argv[1])
