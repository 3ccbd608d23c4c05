"""The chat template, rendered with jinja2 exactly as the model file defines it.

GGUF files carry the template in ``tokenizer.chat_template`` (HF's ``tokenizer_config.json``
has the same string). Like transformers we render it in jinja2's immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, pass ``messages``, ``add_generation_prompt`` and the
special-token strings, and provide ``raise_exception`` for templates that validate roles.
The trade-off: the template is trusted to be jinja, nothing more; a template that needs
another helper fails with a clear error instead of rendering something subtly different.
"""

from __future__ import annotations


class ChatTemplateError(ValueError):
    """The template is missing, or failed to render these messages."""


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ChatTemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template does not parse: {exc}") from exc
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        from jinja2.exceptions import TemplateError

        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ChatTemplateError("each message needs a string 'role' and a string 'content'")
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
