"""Prompts written by a checkpoint's own chat template.

A multimodal checkpoint carries its processor's chat template (chat_template.jinja),
which says where an image goes in a prompt's text and how it is marked: vLLM and
transformers expand that mark to the image's feature tokens. The harness renders the
template once per prompt, here, and tokenizes the result, so every engine and the
golden see the same token ids (the placeholders still unexpanded, as vLLM takes
token prompts with images).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TEMPLATE_FILE = "chat_template.jinja"
# stands for the prompt's text while the template is rendered
_TEXT = "\x00TEXT\x00"


@dataclass(frozen=True)
class Media:
    """How many images, videos and audio clips a prompt has (they come before its text)."""

    images: int = 0
    videos: int = 0
    audios: int = 0


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    bos_token: str

    def render(self, text: str, media: Media) -> str:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # templates come with checkpoints

        content = (
            [{"type": "image"}] * media.images
            + [{"type": "video"}] * media.videos
            + [{"type": "audio"}] * media.audios
            + [{"type": "text", "text": text}]
        )
        template = ImmutableSandboxedEnvironment().from_string(self.source)
        return template.render(
            messages=[{"role": "user", "content": content}], bos_token=self.bos_token, add_generation_prompt=True
        )

    def prompt_ids(self, text: str, media: Media, max_text_tokens: int, tokenizer) -> list[int]:
        """Token ids of the prompt: the template's own tokens (the media's marks
        among them) around at most `max_text_tokens` tokens of `text`. The text may not hold a special token (an
        image placeholder in the text would take an image the prompt does not have)."""
        before, after = self.render(_TEXT, media).split(_TEXT)
        text_ids = tokenizer.encode(text, add_special_tokens=False).ids[:max_text_tokens]
        special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
        held = [t for t in special if t in text]
        if held:
            raise ValueError(f"prompt text {text[:40]!r} holds the special token(s) {held}; pick other prompts")
        return _ids(before, tokenizer) + text_ids + _ids(after, tokenizer)


def _ids(text: str, tokenizer) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids if text else []


def template_of(model_dir: Path) -> ChatTemplate | None:
    """The checkpoint's chat template, or None when it has none (a text model)."""
    path = model_dir / TEMPLATE_FILE
    if not path.is_file():
        return None
    config = (
        json.loads((model_dir / "tokenizer_config.json").read_text()) if (model_dir / "tokenizer_config.json").is_file() else {}
    )
    bos = config.get("bos_token") or ""
    return ChatTemplate(path.read_text(), bos if isinstance(bos, str) else bos.get("content", ""))
