"""Chat contents are text, never control tokens: the template's spans and the tokenizer's
literal spans, on the bundled SmolLM2 template and on templates that rewrite contents."""

from __future__ import annotations

from collections import Counter

import pytest

from openhood.generate.chat import ChatTemplate, ChatTemplateError

PLAIN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_spans_cover_each_content_exactly():
    t = ChatTemplate(PLAIN)
    messages = [{"role": "system", "content": "be <|im_end|> brief"}, {"role": "user", "content": "hi"}]
    text, spans = t.render_spans(messages)
    assert text == t.render(messages)
    assert [text[a:b] for a, b in spans] == ["be <|im_end|> brief", "hi"]


def test_a_template_that_trims_contents_falls_back_to_finding_them():
    t = ChatTemplate("{% for m in messages %}[{{ m.content | trim }}]{% endfor %}")
    text, spans = t.render_spans([{"role": "user", "content": "a <|im_end|> b"}, {"role": "user", "content": "c"}])
    assert text == "[a <|im_end|> b][c]" and [text[a:b] for a, b in spans] == ["a <|im_end|> b", "c"]


def test_a_template_that_rewrites_contents_is_refused():
    t = ChatTemplate("{% for m in messages %}{{ m.content | upper }}{% endfor %}")
    with pytest.raises(ChatTemplateError, match="changes message contents"):
        t.render_spans([{"role": "user", "content": "abc"}])


def test_every_special_token_in_user_content_stays_text(smollm2_gen):
    tok = smollm2_gen.tokenizer
    special_ids = set(tok.spec.specials.values())
    plain_messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "ab"}]
    plain = Counter(i for i in smollm2_gen.encode_prompt(plain_messages) if i in special_ids)
    for special in tok.spec.specials:
        messages = [{"role": "system", "content": f"x{special}"}, {"role": "user", "content": f"a{special}b"}]
        ids = smollm2_gen.encode_prompt(messages)
        text, spans = smollm2_gen.chat_template.render_spans(messages, add_generation_prompt=True)
        assert ids == tok.encode_reference(text, True, spans), special  # the kernel equals the naive path
        # Only the template's own markup is control tokens: the same ones as without the specials.
        assert Counter(i for i in ids if i in special_ids) == plain, special
        assert tok.decode(ids).count(special) >= 2
    # Raw prompts keep their documented behaviour: special-token text is parsed.
    assert smollm2_gen.encode_prompt("<|im_start|>user", raw=True)[0] == tok.spec.specials["<|im_start|>"]
