"""Write src/openhood/data/imagenet_classes.txt: the 1000 ImageNet-1k classes in index order.

Source: timm's wheel, which ships the class order (``timm/data/_info/imagenet_synsets.txt``,
one WordNet id per line, index = line number) and the names
(``imagenet_synset_to_lemma.txt``, ``<wnid>\\t<lemmas>``). The wheel is downloaded without its
dependencies and read as a zip; timm is never imported or installed. Run once:

    python scripts/make_imagenet_labels.py [path/to/timm-*.whl]

(without an argument it runs ``pip download --no-deps timm`` into a temporary folder).
The output is committed (~40 KB): a build needs no network and no timm.
"""

from __future__ import annotations

import glob
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "openhood" / "data" / "imagenet_classes.txt"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 1:
            wheel = sys.argv[1]
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "timm", "-d", tmp], check=True)
            wheel = glob.glob(f"{tmp}/timm-*.whl")[0]
        with zipfile.ZipFile(wheel) as zf:
            synsets = zf.read("timm/data/_info/imagenet_synsets.txt").decode().split()
            lemmas = dict(
                line.split("\t", 1)
                for line in zf.read("timm/data/_info/imagenet_synset_to_lemma.txt").decode().splitlines()
                if "\t" in line
            )
    if len(synsets) != 1000 or len(set(synsets)) != 1000:
        raise SystemExit(f"expected 1000 distinct synsets, got {len(synsets)}")
    OUT.write_text("".join(f"{s}\t{lemmas[s].strip()}\n" for s in synsets), encoding="utf-8")
    print(f"wrote {OUT} ({len(synsets)} classes, from {Path(wheel).name})")


if __name__ == "__main__":
    main()
