"""The reference byte-level BPE tokenizer, built with HF ``tokenizers`` from the same spec.

For tests, fixture scripts and benchmarks only (``tokenizers`` is a test dependency, never
imported by openhood at run time). Built here, not loaded from the GGUF by transformers,
because transformers' GGUF converter falls back to GPT-2's pre-tokenizer and so disagrees
with SmolLM2 wherever whitespace precedes a digit; SmolLM2's own ``tokenizer.json`` uses
``Digits(individual_digits=True)`` before ``ByteLevel``, which is what we assemble.
"""

from __future__ import annotations

from openhood.tokenizer.bpe import BPESpec


def hf_bpe_tokenizer(spec: BPESpec):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(spec.tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(spec.merges), fuse_unk=False, byte_fallback=False))
    steps: list = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if spec.split_digits:
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    specials = sorted(spec.specials.items(), key=lambda kv: kv[1])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, _ in specials])
    return tok
