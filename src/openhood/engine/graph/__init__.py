"""openhood.engine.graph: the middle floor, op graphs and how they run.

``graph`` (a topologically ordered list of named nodes), ``runtime`` (the ``Executor``: one
kernel per op type, values freed after last use), ``fusion`` (rewrites into fewer, fatter
nodes with identical output), ``buffers`` (activation buffers reused across nodes and calls),
``packing`` (padding-free execution of a text batch), ``conv`` (the CNN ops, dispatching to the
convolution kernels) and ``mbconv_plan`` (an inverted-residual block as prepared native call
lists, which the executor dispatches), ``profiler`` (per-op cost against the machine's peak).

The trade-off: a graph is data, so fusion, precision swaps (``engine.quant``) and profiling
work on any architecture's graph; an architecture that steps its own loop (Llama) does not
use it.
"""
