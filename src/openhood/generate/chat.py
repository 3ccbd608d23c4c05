"""The chat template, rendered with jinja2 exactly as the model file defines it.

GGUF files carry the template in ``tokenizer.chat_template`` (HF's ``tokenizer_config.json``
has the same string). Like transformers we render it in jinja2's immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, pass ``messages``, ``add_generation_prompt`` and the
special-token strings, and provide ``raise_exception`` for templates that validate roles.
The trade-off: the template is trusted to be jinja, nothing more; a template that needs
another helper fails with a clear error instead of rendering something subtly different.

``render_spans`` also says where each message's content landed in the text, so the tokenizer
can read the template's markup with special tokens on and the contents with them off: a user
who writes ``<|im_end|>`` gets those characters, never the control token (transformers'
``apply_chat_template`` + encode parses it, which lets a user close their turn and open a
system turn). It renders once with a unique placeholder per content, puts the contents in
afterwards and checks the result equals a normal rendering; where a template transforms
contents (trims them), the spans come from finding each content in the normal rendering, and a
content it rewrote beyond finding is refused (400 at the route) rather than guessed.
"""

from __future__ import annotations

import re


class ChatTemplateError(ValueError):
    """The template is missing, or failed to render these messages."""


# Private-use code points frame each placeholder: nothing a template adds contains them.
_OPEN, _CLOSE = "\ue000", "\ue001"
_MARK = re.compile(_OPEN + r"(\d+)" + _CLOSE)


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

    def render_spans(
        self, messages: list[dict], add_generation_prompt: bool = True
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and the (start, end) character range of every message content in it."""
        marks = [f"{_OPEN}{i}{_CLOSE}" for i in range(len(messages))]
        framed = self.render(
            [{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)], add_generation_prompt
        )
        # One scan (linear in the text: a request may carry tens of thousands of messages).
        marked = [(m.start(), m.end(), int(m.group(1))) for m in _MARK.finditer(framed)]
        if sorted(i for _, _, i in marked) == list(range(len(messages))) and framed.count(_OPEN) == len(marked):
            parts, spans, pos, length = [], [], 0, 0
            for start, end, i in marked:
                content = messages[i]["content"]
                parts.append(framed[pos:start])
                length += start - pos
                spans.append((length, length + len(content)))
                parts.append(content)
                length += len(content)
                pos = end
            parts.append(framed[pos:])
            text = "".join(parts)
            if text == self.render(messages, add_generation_prompt):  # contents went in unchanged
                return text, spans
        text = self.render(messages, add_generation_prompt)  # the template rewrote a content
        spans, pos = [], 0
        for m in messages:
            found = text.find(m["content"], pos)
            if found < 0:
                raise ChatTemplateError("the chat template changes message contents; cannot tell content from markup")
            spans.append((found, found + len(m["content"])))
            pos = found + len(m["content"])
        return text, spans

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
