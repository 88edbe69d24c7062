"""Triton kernels for MSA on CUDA (ops.py is what the model dispatches to); each module keeps
a plain-torch reference() that the tests compare against. Imports triton: load lazily."""
