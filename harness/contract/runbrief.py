"""The run brief: what the harness tells an engine process to do.

This is the contract between the harness process and the engine processes. The
harness writes it as JSON next to the run's outputs (as spec.json: the file keeps
its name, so run directories written before the rename still read); each engine process (every
rank of the reference engine, or the one vLLM driver process) reads it. Engine
side code may import this module: it depends on the standard library only.

A workload is a plain dict so engines can pass through fields they do not know:

    {"name": "logits", "kind": "logprobs", "prompts": [[1, 2, 3], ...], "top_k": 20}
        teacher-forced: the top-k next-token logprobs at every position of every
        prompt (position i is the distribution of token i+1).
    {"name": "greedy", "kind": "greedy", "prompts": [[...], ...],
     "max_new_tokens": 16, "top_k": 20}
        greedy generation of exactly max_new_tokens per prompt (no EOS stop), with
        the top-k logprobs of every generated step (used by the near-tie rule).
    {"name": "eval_gsm8k", "kind": "generate", "prompts": [[...], ...],
     "max_new_tokens": 256, "stop": [[13, 13], ...], "eos_token_id": 1}
        what a task eval asks (harness/run/evals): greedy (argmax) generation, batched
        however the engine likes. A sequence stops after it emits eos_token_id (kept;
        null: no EOS stop), after its generated tokens END with one of the `stop` id
        sequences (kept; only generated tokens count, never the prompt's; empty
        sequences are ignored), or at max_new_tokens tokens. `stop_reached` below
        is the rule every engine applies. "stop" may be absent (none) and
        "eos_token_id" null (no EOS stop). No logprobs are asked; the comparison
        checks skip this kind (the evals score it). Outputs: tokens [P, N] padded
        with -1 after the stop, lengths [P] (harness/contract/outputs.py).

Image inputs (models with a vision encoder): a workload may carry
    "images": [null | "/abs/path/to/image.png" | ["/abs/a.png", "/abs/b.png"], ...]
                                                         one entry per prompt
PNG files written by the harness; a prompt with an image holds the model's image
placeholder token(s) where each image goes, in order. Text-only prompts have null. Engines
read the PNG themselves (Pillow is allowed on the engine side for this).
Videos and audio clips likewise, for models that take them:
    "videos": [null | "/abs/v.npy" | [...], ...]   [T, H, W, 3] uint8 frames (numpy .npy) at
                                                   VIDEO_FPS, every frame used (video_metadata)
    "audios": [null | "/abs/a.npy" | [...], ...]   [N] float32 mono samples at 16000 Hz
In a prompt's text the images' marks come first, then the videos', then the audios'.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.contract.axes import RunAxes
from harness.contract.jsonfile import JSONObject, from_fields, read_json

WORKLOAD_KINDS = ("logprobs", "greedy", "generate")
# A workload's media fields and the modality each holds (vLLM's multi_modal_data keys)
MEDIA = {"images": "image", "videos": "video", "audios": "audio"}
AUDIO_RATE = 16000  # Hz of every audio clip a run brief names
# frames per second of every video a run brief names (all its frames are used)
VIDEO_FPS = 2.0


def entry_list(entry: str | list[str] | None) -> list[str]:
    """One prompt's entry of a media field (null, one item, or a list of them) as a list."""
    return entry if isinstance(entry, list) else [entry] if entry else []


def prompt_media(workload: JSONObject, prompt: int) -> dict[str, list[str]]:
    """The media of one prompt, by field (MEDIA), each a list: empty where it has none."""
    return {field: entry_list((workload.get(field) or [None] * (prompt + 1))[prompt]) for field in MEDIA}


def video_metadata(frames: int) -> JSONObject:  # keyword arguments of a VideoMetadata
    """What a video processor is told of a run brief's video: its rate, every frame taken
    as it is (no sampling), in the form vLLM builds for its own dummy videos."""
    return {
        "fps": VIDEO_FPS,
        "duration": frames / VIDEO_FPS,
        "total_num_frames": frames,
        "frames_indices": list(range(frames)),
        "video_backend": "opencv",
        "do_sample_frames": False,
    }


def stop_reached(generated: list[int], stop: list[list[int]], eos_token_id: int | None, end: int | None = None) -> bool:
    """The `generate` stop rule: whether a sequence whose generated tokens are
    generated[:end] (all of them by default) stops there: its last token is EOS, or
    its generated tokens end with one of the stop sequences."""
    end = len(generated) if end is None else end
    if end <= 0:
        return False
    if eos_token_id is not None and generated[end - 1] == eos_token_id:
        return True
    for seq in stop:
        n = len(seq)
        if 0 < n <= end and generated[end - n : end] == list(seq):
            return True
    return False


def cut_generation(tokens: list[int], stop: list[list[int]], eos_token_id: int | None, max_new_tokens: int) -> list[int]:
    """tokens generated past the stop (an engine that cannot stop on a sequence of
    ids) -> the tokens a `generate` workload keeps: up to and including the first
    place the stop rule fires, at most max_new_tokens."""
    tokens = list(tokens)[:max_new_tokens]
    for end in range(1, len(tokens) + 1):
        if stop_reached(tokens, stop, eos_token_id, end):
            return tokens[:end]
    return tokens


def generate_params(workload: JSONObject) -> tuple[int, list[list[int]], int | None]:
    """(max_new_tokens, stop sequences, eos_token_id) of a `generate` workload."""
    eos = workload.get("eos_token_id")
    stop = [list(map(int, s)) for s in workload.get("stop") or [] if len(s)]
    return int(workload["max_new_tokens"]), stop, None if eos is None else int(eos)


@dataclass
class RunBrief:
    scenario_id: str
    engine: str
    model_dir: str
    dtype: str  # "float32" | "bfloat16" | "float16"
    # The scenario's axis values (harness/contract/axes.py; read them typed through
    # `axes`), plus any axis of the engine's own.
    settings: JSONObject
    workloads: list[JSONObject]
    output_dir: str
    # Named fault switches (engine-defined), e.g. "rank-raise@1". Off by default.
    faults: list[str] = field(default_factory=list)
    device: str = "cpu"  # "cpu" (gloo) or "cuda" (nccl)
    seed: int = 0

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> RunBrief:
        return from_fields(cls, read_json(path), f"{path} is not a run brief")

    @property
    def axes(self) -> RunAxes:
        """The run's declared axes, typed, every one at its default unless set."""
        return RunAxes.of(self.settings)
