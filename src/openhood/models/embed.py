"""The ``embed`` task for BERT-family sentence-embedding folders: tokenizer → encoder → pooling.

Reads the folder once (``engine.models.bert.read_config``: sizes, max length, pooling, Normalize) and
hands that config down: the graph is built from it, the tokenizer truncates to its max length,
the postprocessor pools and normalizes as it says, and the readiness check expects unit norm
only when the model normalizes. The backend runs the encoder only (``head=False``); pooling is
the postprocessor's. The trade-off: only BERT encoders with mean pooling are accepted (other
poolings are refused with a clear error by ``read_config``) — the engine implements no more.
"""

from __future__ import annotations

from pathlib import Path

from openhood.models.options import EngineOptions, worker_backends
from openhood.models.pooling import MeanPooling
from openhood.models.served import OutputSpec, ServedModel
from openhood.models.tasks import Task
from openhood.models.text import TextPreprocessor


def load_text_embedder(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.backends import load_backend, prepare_graph
    from openhood.engine.models.bert import TOKEN_OUTPUT, load_bert, read_config
    from openhood.tokenizer import WordPieceTokenizer

    config = read_config(folder)

    def build_graph():
        graph = load_bert(folder, head=False, config=config).graph
        return prepare_graph(graph, fusion=options.fusion, precision=options.precision, model_dir=folder)

    first = load_backend(options.backend, build_graph, precision=options.precision, threads=options.threads)
    backends, wide = worker_backends(first, options)
    return ServedModel(
        name=name,
        task=Task.EMBED,
        folder=folder,
        preprocessor=TextPreprocessor(WordPieceTokenizer.from_pretrained(folder), config.max_length),
        backends=backends,
        wide=wide,
        postprocessor=MeanPooling(config.normalize, states=TOKEN_OUTPUT),
        output=OutputSpec((config.hidden,), unit_norm=config.normalize),
        info={
            "backend": first.name,
            "precision": options.precision,
            "dim": config.hidden,
            "normalized": config.normalize,
            "layers": config.layers,
        },
    )
