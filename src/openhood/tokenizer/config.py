"""Read a Hugging Face tokenizer definition into a plain ``TokenizerSpec``, refusing what we cannot honour.

Sources, in order: ``tokenizer.json`` (the fast-tokenizer file, authoritative), else ``vocab.txt``
+ ``tokenizer_config.json`` (the slow BertTokenizer files, converted the way ``transformers``
converts them). The trade-off is strictness: any component, option or value outside the BERT
WordPiece pipeline we implement raises ``UnsupportedTokenizerError`` naming the exact JSON path,
because a silently approximated tokenizer produces plausible but wrong ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from openhood.tokenizer.normalizer import BertNormalizer


class TokenizerConfigError(ValueError):
    """The tokenizer files are missing or malformed."""


class UnsupportedTokenizerError(TokenizerConfigError):
    """The tokenizer declares a component or option openhood cannot reproduce exactly."""


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool


@dataclass(frozen=True)
class TokenizerSpec:
    vocab: dict[str, int]
    unk_token: str
    continuing_subword_prefix: str
    max_input_chars_per_word: int
    normalizer: BertNormalizer
    added_tokens: tuple[AddedToken, ...]
    prefix_ids: tuple[int, ...]  # template specials before the sequence, e.g. ([CLS],)
    suffix_ids: tuple[int, ...]  # template specials after it, e.g. ([SEP],)
    # Declared defaults (None = not declared); the API's max_length=None still means "no truncation".
    truncation_max_length: int | None = None
    padding_length: int | None = None  # Fixed padding length; None = pad to longest
    pad_id: int = 0
    pad_token: str = "[PAD]"
    pad_type_id: int = 0
    pad_left: bool = False
    decoder_prefix: str = "##"
    decoder_cleanup: bool = True
    source: str = ""


def _refuse(path: str, value, supported: str) -> UnsupportedTokenizerError:
    return UnsupportedTokenizerError(f"unsupported tokenizer setting {path} = {value!r}: openhood supports {supported}")


def _check_keys(obj: dict, path: str, allowed: set[str]) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise UnsupportedTokenizerError(f"unsupported tokenizer setting(s) {path}.{{{', '.join(unknown)}}}")


def load_spec(path: str | Path) -> TokenizerSpec:
    """``path`` is a model folder or a ``tokenizer.json`` / ``vocab.txt`` file."""
    path = Path(path).expanduser()
    if path.is_file():
        if path.suffix == ".json":
            return _from_tokenizer_json(path)
        if path.suffix == ".txt":
            return _from_vocab_txt(path, path.parent / "tokenizer_config.json")
        raise TokenizerConfigError(f"{path}: expected a tokenizer.json or vocab.txt file, or a model folder")
    if not path.is_dir():
        raise TokenizerConfigError(f"{path} does not exist (expected a model folder or a tokenizer.json file)")
    if (path / "tokenizer.json").is_file():
        return _from_tokenizer_json(path / "tokenizer.json")
    if (path / "vocab.txt").is_file():
        return _from_vocab_txt(path / "vocab.txt", path / "tokenizer_config.json")
    raise TokenizerConfigError(f"{path} has neither tokenizer.json nor vocab.txt")


def _from_tokenizer_json(path: Path) -> TokenizerSpec:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerConfigError(f"cannot read {path}: {exc}") from exc
    _check_keys(
        data,
        "tokenizer",
        {
            "version",
            "truncation",
            "padding",
            "added_tokens",
            "normalizer",
            "pre_tokenizer",
            "model",
            "post_processor",
            "decoder",
        },
    )

    model = data.get("model") or {}
    if model.get("type") != "WordPiece":
        raise _refuse("model.type", model.get("type"), "WordPiece")
    _check_keys(model, "model", {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"})
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise TokenizerConfigError(f"{path}: model.vocab is missing or empty")
    prefix = model.get("continuing_subword_prefix", "##")
    if not prefix:
        raise _refuse("model.continuing_subword_prefix", prefix, "a non-empty prefix")

    normalizer = _normalizer(data.get("normalizer"))
    pre = data.get("pre_tokenizer")
    if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
        raise _refuse("pre_tokenizer", pre, "BertPreTokenizer")

    added = []
    for i, tok in enumerate(data.get("added_tokens") or []):
        where = f"added_tokens[{i}]"
        _check_keys(tok, where, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"})
        for flag in ("single_word", "lstrip", "rstrip", "normalized"):
            if tok.get(flag, False):
                raise _refuse(f"{where}.{flag}", True, "added tokens matched verbatim (false)")
        if not tok.get("content"):
            raise TokenizerConfigError(f"{path}: {where} has empty content")
        added.append(AddedToken(tok["content"], int(tok["id"]), bool(tok.get("special", False))))

    token_ids = dict(vocab)
    for tok in added:
        token_ids.setdefault(tok.content, tok.id)
    unk = model.get("unk_token", "[UNK]")
    if unk not in token_ids:
        raise TokenizerConfigError(f"{path}: unk_token {unk!r} is not in the vocabulary")
    prefix_ids, suffix_ids = _post_processor(data.get("post_processor"), token_ids)

    trunc_len = None
    trunc = data.get("truncation")
    if trunc is not None:
        _check_keys(trunc, "truncation", {"max_length", "strategy", "stride", "direction"})
        if trunc.get("direction", "Right") != "Right":
            raise _refuse("truncation.direction", trunc.get("direction"), "Right")
        if trunc.get("strategy", "LongestFirst") not in ("LongestFirst", "OnlyFirst"):
            raise _refuse("truncation.strategy", trunc.get("strategy"), "LongestFirst or OnlyFirst")
        trunc_len = int(trunc["max_length"])

    pad = data.get("padding")
    pad_kw: dict = {}
    if pad is not None:
        _check_keys(
            pad, "padding", {"strategy", "direction", "pad_to_multiple_of", "pad_id", "pad_type_id", "pad_token"}
        )
        if pad.get("pad_to_multiple_of"):
            raise _refuse("padding.pad_to_multiple_of", pad["pad_to_multiple_of"], "null")
        strategy = pad.get("strategy", "BatchLongest")
        if isinstance(strategy, dict) and set(strategy) == {"Fixed"}:
            pad_kw["padding_length"] = int(strategy["Fixed"])
        elif strategy != "BatchLongest":
            raise _refuse("padding.strategy", strategy, "BatchLongest or {'Fixed': n}")
        if pad.get("direction", "Right") not in ("Right", "Left"):
            raise _refuse("padding.direction", pad.get("direction"), "Right or Left")
        pad_kw.update(
            pad_id=int(pad.get("pad_id", 0)),
            pad_token=pad.get("pad_token", "[PAD]"),
            pad_type_id=int(pad.get("pad_type_id", 0)),
            pad_left=pad.get("direction") == "Left",
        )

    dec = data.get("decoder")
    dec_kw: dict = {}
    if dec is not None:
        if dec.get("type") != "WordPiece":
            raise _refuse("decoder.type", dec.get("type"), "WordPiece")
        dec_kw = dict(decoder_prefix=dec.get("prefix", "##"), decoder_cleanup=bool(dec.get("cleanup", True)))

    return TokenizerSpec(
        vocab=dict(vocab),
        unk_token=unk,
        continuing_subword_prefix=prefix,
        max_input_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
        normalizer=normalizer,
        added_tokens=tuple(added),
        prefix_ids=prefix_ids,
        suffix_ids=suffix_ids,
        truncation_max_length=trunc_len,
        source=str(path),
        **pad_kw,
        **dec_kw,
    )


def _normalizer(norm) -> BertNormalizer:
    if not isinstance(norm, dict) or norm.get("type") != "BertNormalizer":
        raise _refuse("normalizer", norm, "BertNormalizer")
    _check_keys(norm, "normalizer", {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"})
    lowercase = bool(norm.get("lowercase", True))
    strip = norm.get("strip_accents")
    return BertNormalizer(
        clean_text=bool(norm.get("clean_text", True)),
        handle_chinese_chars=bool(norm.get("handle_chinese_chars", True)),
        strip_accents=lowercase if strip is None else bool(strip),  # HF: null follows lowercase
        lowercase=lowercase,
    )


def _post_processor(post, token_ids: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Special ids placed before and after the single sequence, from the post-processor."""
    if post is None:
        return (), ()
    kind = post.get("type")
    if kind == "BertProcessing":
        return (int(post["cls"][1]),), (int(post["sep"][1]),)
    if kind != "TemplateProcessing":
        raise _refuse("post_processor.type", kind, "TemplateProcessing or BertProcessing")
    specials = post.get("special_tokens") or {}
    before: list[int] = []
    after: list[int] = []
    seen_a = False
    for i, piece in enumerate(post.get("single") or []):
        if "Sequence" in piece:
            if piece["Sequence"].get("id") != "A" or seen_a:
                raise _refuse(f"post_processor.single[{i}]", piece, "one Sequence A")
            if piece["Sequence"].get("type_id", 0) != 0:
                raise _refuse(f"post_processor.single[{i}].type_id", piece["Sequence"].get("type_id"), "0")
            seen_a = True
            continue
        name = piece["SpecialToken"]["id"]
        if piece["SpecialToken"].get("type_id", 0) != 0:
            raise _refuse(f"post_processor.single[{i}].type_id", piece["SpecialToken"].get("type_id"), "0")
        if name in specials:
            ids = [int(x) for x in specials[name]["ids"]]
        elif name in token_ids:
            ids = [token_ids[name]]
        else:
            raise TokenizerConfigError(f"post_processor special token {name!r} has no id")
        (after if seen_a else before).extend(ids)
    if not seen_a:
        raise _refuse("post_processor.single", post.get("single"), "a template containing Sequence A")
    return tuple(before), tuple(after)


def _from_vocab_txt(vocab_path: Path, config_path: Path) -> TokenizerSpec:
    """The slow BertTokenizer files, converted with the defaults ``transformers`` uses."""
    try:
        lines = vocab_path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerConfigError(f"cannot read {vocab_path}: {exc}") from exc
    if lines and lines[-1] == "":
        lines.pop()
    vocab: dict[str, int] = {}
    for i, line in enumerate(lines):
        vocab.setdefault(line.rstrip("\r"), i)
    cfg: dict = {}
    if config_path.is_file():
        try:
            cfg = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TokenizerConfigError(f"cannot read {config_path}: {exc}") from exc
    cls_name = cfg.get("tokenizer_class")
    if cls_name not in (None, "BertTokenizer", "BertTokenizerFast"):
        raise _refuse("tokenizer_config.tokenizer_class", cls_name, "BertTokenizer(Fast)")
    if cfg.get("do_basic_tokenize", True) is not True:
        raise _refuse("tokenizer_config.do_basic_tokenize", cfg.get("do_basic_tokenize"), "true")
    if cfg.get("never_split"):
        raise _refuse("tokenizer_config.never_split", cfg.get("never_split"), "null")

    def tok_str(key: str, default: str) -> str:
        value = cfg.get(key, default)
        return value["content"] if isinstance(value, dict) else value

    names = [
        tok_str(k, d)
        for k, d in (
            ("pad_token", "[PAD]"),
            ("unk_token", "[UNK]"),
            ("cls_token", "[CLS]"),
            ("sep_token", "[SEP]"),
            ("mask_token", "[MASK]"),
        )
    ]
    for name in names:
        if name not in vocab:
            raise TokenizerConfigError(f"{vocab_path}: special token {name!r} is not in the vocabulary")
    pad, unk, cls, sep, _mask = names
    lowercase = bool(cfg.get("do_lower_case", True))
    strip = cfg.get("strip_accents")
    model_max = cfg.get("model_max_length")
    return TokenizerSpec(
        vocab=vocab,
        unk_token=unk,
        continuing_subword_prefix="##",
        max_input_chars_per_word=100,
        normalizer=BertNormalizer(
            clean_text=True,
            handle_chinese_chars=bool(cfg.get("tokenize_chinese_chars", True)),
            strip_accents=lowercase if strip is None else bool(strip),
            lowercase=lowercase,
        ),
        added_tokens=tuple(AddedToken(n, vocab[n], True) for n in dict.fromkeys(names)),
        prefix_ids=(vocab[cls],),
        suffix_ids=(vocab[sep],),
        truncation_max_length=int(model_max) if isinstance(model_max, int) and model_max < 10**6 else None,
        pad_id=vocab[pad],
        pad_token=pad,
        source=str(vocab_path),
    )
