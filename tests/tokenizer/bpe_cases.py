"""Texts that break naive byte-level BPE tokenizers (imported by the BPE parity tests and the fixture script)."""

from nasty_cases import NASTY

BPE_NASTY = [
    *NASTY,
    "a 1",
    "a  1",
    "a   12 3",
    " 1",
    "1 ",
    "x\n1\n\n2",
    "\t1",
    "１２３ ٣٤ ⅷ ½",
    "v1.2.3-rc4 3.14159",
    "I'm you're he's we'd they'll I've don't DON'T O'Neil 's",
    "    indented code\n\tif x:\n\t\treturn 0  \n",
    "trailing spaces   ",
    "   leading",
    "a \n b",
    " \u3000 x",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_start|>text<|endoftext|><|im_end",
    "<repo_name>x<file_sep>y <gh_stars>10",
    "\x01\x02\x03 bytes missing from the vocabulary \x1c\x1d\x1e\x1f",
    "emoji with skin tone 👩🏾\u200d💻 and flags 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "mixed scripts: Tokyo東京Москва123abc",
]
