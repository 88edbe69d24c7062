"""The model layers in plain torch (the reference and the CPU path), each dispatching CUDA
tensors to its Triton kernel in kernels/: paged attention, MSA, linear, norms, RoPE, MLPs, MoE."""
