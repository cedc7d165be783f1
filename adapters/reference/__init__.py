"""The bundled reference target: the correct loss-path math and its planted bugs.

Modules: ``ops`` (the math, cleanrl-style, and its table `REFERENCE_OPS`), ``adapter``
(`ReferenceAdapter`: each boundary composed from that table), ``plants`` (the planted bugs,
one record each; torch-free to list). Nothing is imported here, so ``plants`` stays light.
"""
