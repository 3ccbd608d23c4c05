"""JSON schema (a documented subset) → a byte-level DFA that accepts exactly the JSON texts we let the model write.

Structured output constrains decoding to this automaton (``generate.token_mask`` lifts it from
bytes to the tokenizer's vocabulary). A schema is compiled by Thompson's construction into a byte
NFA, then determinized (subset construction over byte equivalence classes) into a dense
``(states, 256)`` table. The text is compact JSON: no whitespace except one optional space after
``:`` and ``,`` (free whitespace would let a model pad forever); object properties come in the
schema's order, each ``required`` one present, the others optional.

Supported subset (anything else that constrains values is refused, naming the keywords):
``type`` (object, array, string, integer, number, boolean, null, or a list of them),
``properties``, ``required``, ``additionalProperties`` (no extra properties are ever written, so
any value validates), ``items``, ``minItems``/``maxItems``, ``minLength``/``maxLength``, ``enum``,
``const``; annotations (``title``, ``description``, ``default``, ``examples``, ``$schema``,
``$id``, ``$comment``) are ignored. ``{"type": "json_object"}`` is any JSON object nested at most
``JSON_OBJECT_DEPTH`` containers deep.

The trade-off: regular languages only. Recursion (``$ref``) and unbounded nesting are refused or
capped, and every bounded count (string lengths, item counts) is unrolled into states, so the
caps below keep a schema's automaton small; in exchange each decoding step is a table lookup.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

JSON_OBJECT_DEPTH = 4  # containers nested inside the top-level object for response_format json_object
MAX_UNROLLED = 64  # the largest minLength/maxLength/minItems/maxItems a schema may bound (each is unrolled)
MAX_DFA_STATES = 20000  # a bigger automaton is refused as too complex
MAX_DIGITS = 16  # integer digits (and fraction/exponent digits) a number may have

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment"})
SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "enum",
        "const",
    }
)
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


class SchemaError(ValueError):
    """The schema uses something outside the supported subset (the message names it)."""


# ---- the byte NFA ------------------------------------------------------------------------------
class NFA:
    """States are ints; ``edges[s]``: (byte set, target); ``eps[s]``: epsilon targets."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1


Frag = tuple[int, int]  # (start, end) states of a fragment
Build = Callable[[NFA], Frag]  # builds a fresh copy of a fragment in an NFA

_CONTROL = frozenset(range(0x20))
_STRING_BYTES = frozenset(range(0x20, 0x80)) - {ord('"'), ord("\\")}
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def byteset(chars: bytes | frozenset[int]) -> Build:
    def build(n: NFA) -> Frag:
        a, b = n.state(), n.state()
        n.edges[a].append((frozenset(chars), b))
        return a, b

    return build


def literal(text: bytes) -> Build:
    return seq(*(byteset(frozenset((c,))) for c in text))


def seq(*parts: Build) -> Build:
    def build(n: NFA) -> Frag:
        start = end = n.state()
        for p in parts:
            a, b = p(n)
            n.eps[end].append(a)
            end = b
        return start, end

    return build


def alt(*parts: Build) -> Build:
    def build(n: NFA) -> Frag:
        start, end = n.state(), n.state()
        for p in parts:
            a, b = p(n)
            n.eps[start].append(a)
            n.eps[b].append(end)
        return start, end

    return build


def repeat(part: Build, lo: int, hi: int | None) -> Build:
    """``part`` lo..hi times (hi None: unbounded); each bounded copy is a fresh fragment."""

    def build(n: NFA) -> Frag:
        start = end = n.state()
        for _ in range(lo):
            a, b = part(n)
            n.eps[end].append(a)
            end = b
        if hi is None:
            a, b = part(n)
            n.eps[end].append(a)
            n.eps[b].append(a)
            out = n.state()
            n.eps[end].append(out)
            n.eps[b].append(out)
            return start, out
        out = n.state()
        for _ in range(hi - lo):
            n.eps[end].append(out)
            a, b = part(n)
            n.eps[end].append(a)
            end = b
        n.eps[end].append(out)
        return start, out

    return build


def separated(item: Build, lo: int, hi: int | None, sep: Build) -> Build:
    """lo..hi ``item``s with ``sep`` between them. Unbounded, the last item is one copy in a loop
    (copies would multiply: nested containers would double the automaton at every level)."""
    if hi == 0:
        return seq()
    if hi is not None:
        body = seq(item, repeat(seq(sep, item), max(lo - 1, 0), hi - 1))
        return body if lo >= 1 else alt(seq(), body)

    def loop(n: NFA) -> Frag:
        a, b = item(n)
        c, d = sep(n)
        n.eps[b].append(c)
        n.eps[d].append(a)
        return a, b

    body = seq(*([seq(item, sep)] * max(lo - 1, 0)), loop)
    return body if lo >= 1 else alt(seq(), body)


_SPACE = alt(seq(), literal(b" "))
_COMMA = seq(literal(b","), _SPACE)
_COLON = seq(literal(b":"), _SPACE)

# one character of a JSON string: printable ASCII, an escape, or a whole UTF-8 sequence
_CONT = frozenset(range(0x80, 0xC0))
_CHAR = alt(
    byteset(_STRING_BYTES),
    seq(literal(b"\\"), byteset(frozenset(b'"\\/bfnrt'))),
    seq(literal(b"\\u"), byteset(_HEX), byteset(_HEX), byteset(_HEX), byteset(_HEX)),
    seq(byteset(frozenset(range(0xC2, 0xE0))), byteset(_CONT)),
    seq(byteset(frozenset(range(0xE0, 0xF0))), byteset(_CONT), byteset(_CONT)),
    seq(byteset(frozenset(range(0xF0, 0xF5))), byteset(_CONT), byteset(_CONT), byteset(_CONT)),
)


def string(lo: int = 0, hi: int | None = None) -> Build:
    return seq(literal(b'"'), repeat(_CHAR, lo, hi), literal(b'"'))


_NONZERO = byteset(frozenset(b"123456789"))
_DIGIT = byteset(_DIGITS)
INTEGER = seq(alt(seq(), literal(b"-")), alt(literal(b"0"), seq(_NONZERO, repeat(_DIGIT, 0, MAX_DIGITS - 1))))
NUMBER = seq(
    INTEGER,
    alt(seq(), seq(literal(b"."), repeat(_DIGIT, 1, MAX_DIGITS))),
    alt(seq(), seq(byteset(frozenset(b"eE")), alt(seq(), byteset(frozenset(b"+-"))), repeat(_DIGIT, 1, 3))),
)
BOOLEAN = alt(literal(b"true"), literal(b"false"))
NULL = literal(b"null")


def any_value(depth: int) -> Build:
    """Any JSON value with at most ``depth`` more containers inside it."""
    scalars = [string(), NUMBER, BOOLEAN, NULL]
    if depth <= 0:
        return alt(*scalars)
    inner = any_value(depth - 1)
    obj = seq(literal(b"{"), separated(seq(string(), _COLON, inner), 0, None, _COMMA), literal(b"}"))
    arr = seq(literal(b"["), separated(inner, 0, None, _COMMA), literal(b"]"))
    return alt(obj, arr, *scalars)


def json_object_grammar(depth: int = JSON_OBJECT_DEPTH) -> Build:
    """``response_format: {"type": "json_object"}``: a JSON object."""
    inner = any_value(depth)
    return seq(literal(b"{"), separated(seq(string(), _COLON, inner), 0, None, _COMMA), literal(b"}"))


# ---- schema → fragment -------------------------------------------------------------------------
def _bound(schema: dict[str, Any], key: str, path: str) -> int | None:
    v = schema.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise SchemaError(f"{path}: '{key}' must be a non-negative integer")
    if v > MAX_UNROLLED:
        raise SchemaError(f"{path}: '{key}' is {v}; this server bounds lengths and counts up to {MAX_UNROLLED}")
    return v


def _range(schema: dict[str, Any], lo_key: str, hi_key: str, path: str) -> tuple[int, int | None]:
    lo, hi = _bound(schema, lo_key, path) or 0, _bound(schema, hi_key, path)
    if hi is not None and hi < lo:
        raise SchemaError(f"{path}: '{hi_key}' is below '{lo_key}'")
    return lo, hi


def unsupported_keywords(schema: dict[str, Any]) -> list[str]:
    return sorted(k for k in schema if k not in SUPPORTED and k not in ANNOTATIONS)


def schema_grammar(schema: Any, path: str = "schema") -> Build:
    """The fragment for one (sub)schema; ``SchemaError`` naming what is outside the subset."""
    if schema is True or schema == {}:
        return any_value(JSON_OBJECT_DEPTH)
    if not isinstance(schema, dict):
        raise SchemaError(f"{path} must be an object")
    bad = unsupported_keywords(schema)
    if bad:
        raise SchemaError(f"{path} uses unsupported keyword(s): {', '.join(bad)}")
    if "const" in schema:
        return literal(json.dumps(schema["const"], separators=(",", ":"), ensure_ascii=False).encode())
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}: 'enum' must be a non-empty array")
        return alt(*(literal(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()) for v in values))
    types = schema.get("type")
    if types is None:
        return any_value(JSON_OBJECT_DEPTH)
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not types or any(t not in TYPES for t in types):
        raise SchemaError(f"{path}: 'type' must be one of {', '.join(TYPES)} or a list of them")
    return alt(*(_typed(schema, t, path) for t in dict.fromkeys(types)))


def _typed(schema: dict[str, Any], kind: str, path: str) -> Build:
    if kind == "string":
        return string(*_range(schema, "minLength", "maxLength", path))
    if kind == "integer":
        return INTEGER
    if kind == "number":
        return NUMBER
    if kind == "boolean":
        return BOOLEAN
    if kind == "null":
        return NULL
    if kind == "array":
        lo, hi = _range(schema, "minItems", "maxItems", path)
        item = schema_grammar(schema.get("items", {}), f"{path}.items")
        return seq(literal(b"["), separated(item, lo, hi, _COMMA), literal(b"]"))
    return _object(schema, path)


def _object(schema: dict[str, Any], path: str) -> Build:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        raise SchemaError(f"{path}: 'properties' must be an object and 'required' an array")
    missing = [r for r in required if r not in props]
    if missing:
        raise SchemaError(f"{path}: 'required' names {', '.join(map(str, missing))}, not in 'properties'")
    extra = schema.get("additionalProperties", False)
    if not props and extra is not False:
        return json_object_grammar(JSON_OBJECT_DEPTH - 1)  # an open object: any members
    pairs = [
        (
            seq(
                literal(json.dumps(name, ensure_ascii=False).encode()),
                _COLON,
                schema_grammar(sub, f"{path}.properties.{name}"),
            ),
            name in required,
        )
        for name, sub in props.items()
    ]

    def build(n: NFA) -> Frag:
        # none[i] / some[i]: before property i with no / some property written (decides the comma)
        start, close = n.state(), n.state()
        none, some = start, n.state()
        for pair, needed in pairs:
            a, b = pair(n)
            comma_a, comma_b = _COMMA(n)
            n.eps[none].append(a)
            n.eps[some].append(comma_a)
            n.eps[comma_b].append(a)
            nxt_none, nxt_some = n.state(), n.state()
            n.eps[b].append(nxt_some)
            if not needed:
                n.eps[none].append(nxt_none)
                n.eps[some].append(nxt_some)
            none, some = nxt_none, nxt_some
        n.eps[none].append(close)
        n.eps[some].append(close)
        return start, close

    return seq(literal(b"{"), build, literal(b"}"))


# ---- NFA → DFA ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ByteDFA:
    """``table[s, b]``: the next state (-1: rejected); state 0 starts; ``accepting[s]``."""

    table: np.ndarray  # (states, 256) int32
    accepting: np.ndarray  # (states,) bool

    @property
    def n_states(self) -> int:
        return int(self.table.shape[0])

    def walk(self, state: int, data: bytes) -> int:
        for b in data:
            if state < 0:
                break
            state = int(self.table[state, b])
        return state


def compile_dfa(grammar: Build) -> ByteDFA:
    n = NFA()
    start, final = grammar(n)

    def closure(states: frozenset[int]) -> frozenset[int]:
        out, todo = set(states), list(states)
        while todo:
            for t in n.eps[todo.pop()]:
                if t not in out:
                    out.add(t)
                    todo.append(t)
        return frozenset(out)

    # byte classes: bytes no edge tells apart behave alike, one representative each
    signature: dict[int, list[int]] = {b: [] for b in range(256)}
    for i, sets in enumerate({s for edges in n.edges for s, _ in edges}):
        for b in sets:
            signature[b].append(i)
    classes: dict[tuple[int, ...], list[int]] = {}
    for b, sig in signature.items():
        classes.setdefault(tuple(sig), []).append(b)
    first = closure(frozenset((start,)))
    index, order = {first: 0}, [first]
    rows: list[np.ndarray] = []
    while len(rows) < len(order):
        current = order[len(rows)]
        row = np.full(256, -1, dtype=np.int32)
        for members in classes.values():
            b = members[0]
            targets = frozenset(t for s in current for bytes_, t in n.edges[s] if b in bytes_)
            if not targets:
                continue
            nxt = closure(targets)
            if nxt not in index:
                if len(order) >= MAX_DFA_STATES:
                    raise SchemaError(f"the schema needs more than {MAX_DFA_STATES} automaton states; simplify it")
                index[nxt] = len(order)
                order.append(nxt)
            row[members] = index[nxt]
        rows.append(row)
    table = np.stack(rows)
    accepting = np.array([final in s for s in order], dtype=bool)
    return ByteDFA(table, accepting)


def distances(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Fewest steps to acceptance per state (-1: never), a backwards breadth-first search over
    ``table`` (states, 256) (-1 entries are no edge)."""
    n = table.shape[0]
    preds: list[set[int]] = [set() for _ in range(n)]
    for s in range(n):
        for t in np.unique(table[s][table[s] >= 0]):
            preds[int(t)].add(s)
    dist = np.full(n, -1, dtype=np.int32)
    frontier = [int(s) for s in np.flatnonzero(accepting)]
    dist[frontier] = 0
    d = 0
    while frontier:
        d += 1
        nxt = []
        for t in frontier:
            for s in preds[t]:
                if dist[s] < 0:
                    dist[s] = d
                    nxt.append(s)
        frontier = nxt
    return dist


@functools.cache
def json_object_dfa() -> ByteDFA:
    """The one ``json_object`` automaton (~2.7k states, seconds to build): built once per process."""
    return compile_dfa(json_object_grammar())


def response_format_dfa(response_format: dict[str, Any]) -> ByteDFA:
    """``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema": {"schema": ...}}`` → its DFA."""
    kind = response_format.get("type")
    if kind == "json_object":
        return json_object_dfa()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise SchemaError("'json_schema' must be an object with a 'schema' object")
        return compile_dfa(schema_grammar(spec.get("schema", {})))
    raise SchemaError(f"response_format type {kind!r} is not one of text, json_object, json_schema")
