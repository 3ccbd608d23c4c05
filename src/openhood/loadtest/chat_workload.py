"""What a chat load test sends: prompt and output lengths drawn, seeded, from a distribution.

Generation cost depends on two lengths: the prompt (prefill, paid before the first token) and
the output (one decode step per token). A test with one fixed length measures one point of that
plane; real chat traffic mixes short questions with pasted documents and one-line answers with
long ones. So each request draws a prompt length and a ``max_tokens`` from a distribution:

- ``N``: always N;
- ``LO-HI``: uniform integers in [LO, HI];
- ``lognormal:MEDIAN:SIGMA[:MAX]``: a long right tail (most short, a few long), cut to
  [1, MAX] (MAX defaults to 8 x MEDIAN).

The trade-off: the client has no tokenizer (it must work against any server), so a prompt of
"N tokens" is N words from the corpus (or a built-in list of common English words, one BPE token
each in GPT-2-style vocabularies). The real prompt length comes back in ``usage.prompt_tokens``
when the server sends it, and the report uses that.

    >>> LengthDist.parse("16-32").describe()
    'uniform 16-32'
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

# Short common words: each is a single token (with its leading space) in GPT-2-style BPE
# vocabularies, so a prompt of N of them is close to N tokens.
_WORDS = (
    "the of and to in is was for on that with as by at from it his an were are which this be "
    "has had one not but all new they first two been more after who when there time into year "
    "other some only over also city most new world state made back water light house small "
    "river town south north day night green stone road"
).split()
MAX_LENGTH = 32_768
# An instruction in front of the drawn words, so a chat model answers at length rather than
# asking what the words mean (outputs cut short by an early end-of-text measure little).
INSTRUCTION = "Continue this text:"


@dataclass(frozen=True)
class LengthDist:
    kind: str  # "fixed", "uniform" or "lognormal"
    a: float  # fixed: N; uniform: LO; lognormal: median
    b: float = 0.0  # uniform: HI; lognormal: sigma
    cap: int = 0  # lognormal: upper cut

    @classmethod
    def parse(cls, spec: str) -> LengthDist:
        """``"64"``, ``"16-256"`` or ``"lognormal:64:0.8[:512]"``; ValueError otherwise."""
        s = spec.strip()
        if re.fullmatch(r"\d+", s):
            dist = cls("fixed", int(s))
        elif m := re.fullmatch(r"(\d+)-(\d+)", s):
            dist = cls("uniform", int(m[1]), int(m[2]))
        elif m := re.fullmatch(r"lognormal:(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)(?::(\d+))?", s):
            median, sigma = float(m[1]), float(m[2])
            dist = cls("lognormal", median, sigma, int(m[3]) if m[3] else max(1, math.ceil(8 * median)))
        else:
            raise ValueError(f"length distribution {spec!r}: expected N, LO-HI or lognormal:MEDIAN:SIGMA[:MAX]")
        dist._check(spec)
        return dist

    def _check(self, spec: str) -> None:
        hi = {"fixed": self.a, "uniform": self.b, "lognormal": self.cap}[self.kind]
        lo = self.a if self.kind != "lognormal" else 1
        if not (1 <= lo <= hi <= MAX_LENGTH) or (self.kind == "lognormal" and self.a < 1):
            raise ValueError(f"length distribution {spec!r}: lengths must lie in [1, {MAX_LENGTH}] with LO <= HI")

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, min(self.cap, round(rng.lognormvariate(math.log(self.a), self.b))))

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"fixed {int(self.a)}"
        if self.kind == "uniform":
            return f"uniform {int(self.a)}-{int(self.b)}"
        return f"lognormal median {self.a:g} sigma {self.b:g} max {self.cap}"


@dataclass(frozen=True)
class ChatItem:
    prompt: str
    prompt_words: int  # the drawn prompt length (the client's estimate of its tokens)
    max_tokens: int


class ChatWorkload:
    """A seeded stream of chat requests: the i-th draw is the same for the same seed."""

    def __init__(self, prompt_dist: LengthDist, output_dist: LengthDist, seed: int, texts: list[str] | None = None):
        words = [w for t in (texts or []) for w in t.split()]
        self._words = words or list(_WORDS)
        self.prompt_dist, self.output_dist = prompt_dist, output_dist
        self._rng = random.Random(seed)

    def draw(self) -> ChatItem:
        n = self.prompt_dist.draw(self._rng)
        max_tokens = self.output_dist.draw(self._rng)
        start = self._rng.randrange(len(self._words))
        # A window of consecutive corpus words (wrapping), so prompts read like the corpus.
        words = [self._words[(start + i) % len(self._words)] for i in range(n)]
        return ChatItem(prompt=f"{INSTRUCTION} {' '.join(words)}", prompt_words=n, max_tokens=max_tokens)
