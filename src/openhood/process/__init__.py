"""openhood.process: tuning of the process a command runs in, not of any model.

``allocator`` (glibc's malloc policy: large temporaries mapped and unmapped, so RSS does not
creep), ``resident`` (after warm-up, give back the JIT compiler's clean pages and the heap's free
ones), ``blas_threads`` (OpenBLAS's idle workers sleep at once, for a decode loop's cores). The commands apply them (``openhood serve``, ``generate``, ``batch``), and
``generate.Generator`` hangs the page release on its decoder's first decode step.

The trade-off: the engine never imports this package, so a forward pass behaves the same in a
test, a benchmark or a server; the price is that a caller who builds a model by hand gets no
tuning unless it asks for it.
"""
