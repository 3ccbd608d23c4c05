"""Reference logits and greedy continuations from Hugging Face transformers, once, for the parity tests.

transformers loads the same GGUF and dequantizes it to float32 (torch, CPU). Run it in the
reference environment, never openhood's:

    PYTHONPATH=$PWD/src /work/main/.venv-ref/bin/python scripts/make_llama_fixtures.py

Prompts are tokenized by the HF ``tokenizers`` anchor with SmolLM2's real pre-tokenizer
(transformers' GGUF tokenizer uses GPT-2's rule, which splits digits differently) and rendered
with the GGUF's chat template. It writes, small on purpose:
- ``tests/fixtures/llama_logits.npz``: for 2 prompts, logits at every prompt position restricted
  to 512 fixed vocabulary ids plus each position's top 16 (ids and values);
- ``tests/fixtures/llama_greedy.json``: for 20 prompts, the 64 greedy tokens, and at each step
  the reference's top-2 logit gap (where a tie-break can legitimately flip).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
N_STEPS = 64
N_VOCAB_SLICE = 512
TOP = 16

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three prime numbers greater than 100.",
    "Translate 'good morning' into Spanish and German.",
    "What is 17 times 23?",
    "Give me a short tip for learning to cook.",
    "Who wrote Romeo and Juliet?",
    "Describe the colour blue to someone who cannot see.",
    "Write a Python function that reverses a string.",
    "Why is the sky blue?",
    "Name two planets in our solar system.",
    "What does HTTP stand for?",
    "Summarize the plot of Cinderella in two sentences.",
    "How many legs does a spider have?",
    "Suggest a name for a small black cat.",
    "What year did the first person land on the Moon?",
    "Tell me a fun fact about octopuses.",
    "Convert 5 kilometres to miles.",
    "Écris une phrase en français sur le printemps.",
]


def main() -> None:
    import jinja2
    import torch
    import transformers

    from openhood.formats.gguf import GGUFFile
    from openhood.generate.bundled import default_gguf_path
    from openhood.tokenizer.bpe import spec_from_gguf
    from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(2)
    path = default_gguf_path()
    g = GGUFFile(path)
    tok = hf_bpe_tokenizer(spec_from_gguf(g))
    template = jinja2.Environment().from_string(g.require("tokenizer.chat_template"))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    model.eval()

    def chat(prompt: str) -> list[int]:
        return tok.encode(
            template.render(messages=[{"role": "user", "content": prompt}], add_generation_prompt=True)
        ).ids

    rng = np.random.default_rng(0)
    vocab_slice = np.sort(rng.choice(model.config.vocab_size, N_VOCAB_SLICE, replace=False))
    arrays = {"vocab_slice": vocab_slice}
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS[:2]):
            ids = chat(prompt)
            logits = model(torch.tensor([ids])).logits[0].float().numpy()  # (T, V)
            top = np.argsort(-logits, axis=1)[:, :TOP]
            arrays[f"ids_{i}"] = np.array(ids, dtype=np.int64)
            arrays[f"slice_{i}"] = logits[:, vocab_slice]
            arrays[f"top_ids_{i}"] = top
            arrays[f"top_vals_{i}"] = np.take_along_axis(logits, top, axis=1)
        np.savez_compressed(FIXTURES / "llama_logits.npz", **arrays)

        greedy = []
        for prompt in PROMPTS:
            ids = chat(prompt)
            out, gaps = [], []
            past, inp = None, torch.tensor([ids])
            for _ in range(N_STEPS):
                res = model(inp, past_key_values=past, use_cache=True)
                past = res.past_key_values
                lg = res.logits[0, -1].float()
                top2 = torch.topk(lg, 2)
                nxt = int(top2.indices[0])
                out.append(nxt)
                gaps.append(round(float(top2.values[0] - top2.values[1]), 6))
                inp = torch.tensor([[nxt]])
            greedy.append({"prompt": prompt, "ids": ids, "greedy": out, "top2_gap": gaps})
            print(f"{prompt[:40]!r}: {tok.decode(out)[:60]!r}  min gap {min(gaps):.4f}")
    (FIXTURES / "llama_greedy.json").write_text(
        json.dumps(
            {
                "model": path.name,
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "steps": N_STEPS,
                "cases": greedy,
            },
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    print("wrote", FIXTURES / "llama_logits.npz", FIXTURES / "llama_greedy.json")


if __name__ == "__main__":
    main()
