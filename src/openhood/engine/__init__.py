"""openhood.engine: a from-scratch NumPy forward pass for BERT-family sentence encoders.

Modules, one job each: ``ops`` (kernels, naive reference beside each fast one), ``linear`` (the
swappable dense layer), ``graph`` (named op graph), ``runtime`` (executor), ``bert`` (folder →
graph), ``fusion`` (graph rewrites), ``profiler`` (per-op cost map), ``parallel``/``blas``
(threading). Heavy work is BLAS GEMMs; everything else is chunked in-place ufuncs.
"""

from openhood.engine.bert import BertConfig, BertModel, load_bert
from openhood.engine.graph import Graph, Node
from openhood.engine.linear import Linear
from openhood.engine.runtime import Executor

__all__ = ["BertConfig", "BertModel", "Executor", "Graph", "Linear", "Node", "load_bert"]
