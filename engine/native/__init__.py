"""The native M3 engine (torch; Triton kernels on CUDA). Imports torch: load it lazily."""
