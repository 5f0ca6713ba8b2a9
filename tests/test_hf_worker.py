"""The transformers (hf) engine's worker: the small choices it makes before a forward."""

from __future__ import annotations

from harness.engines.hf.worker import _text_without_pixels


class RequiresPixels:
    """A model whose forward cannot run without an image (BLIP-2's), with its language model."""

    def __init__(self):
        self.language_model = lambda **inputs: ("language model", sorted(inputs))

    def forward(self, input_ids, pixel_values, attention_mask=None):
        return ("whole model", pixel_values)

    __call__ = forward


class TakesPixelsOptionally:
    language_model = None

    def forward(self, input_ids, pixel_values=None):
        return "whole model"

    __call__ = forward


def test_a_text_only_prompt_to_a_model_that_requires_pixels_goes_to_its_language_model():
    run = _text_without_pixels(RequiresPixels())
    assert run(input_ids=[1, 2], pixel_values=None, attention_mask=[1, 1]) == ("language model", ["attention_mask", "input_ids"])
    assert run(input_ids=[1, 2]) == ("language model", ["input_ids"])


def test_a_prompt_with_an_image_still_goes_to_the_whole_model():
    run = _text_without_pixels(RequiresPixels())
    assert run(input_ids=[1, 2], pixel_values="pixels") == ("whole model", "pixels")


def test_a_model_whose_pixels_are_optional_is_left_as_it_is():
    model = TakesPixelsOptionally()
    assert _text_without_pixels(model) is model
