"""jarp against upstream: Warp's own JAX interop tests, the examples of Warp's interop guide, a Warp FEM library's
kernels ported unchanged, and the Warp and JAX internals jarp relies on still having the shape it expects.
"""
