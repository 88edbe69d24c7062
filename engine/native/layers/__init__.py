"""The model layers in plain torch (the reference and the CPU path): paged attention, MSA,
linear, norms, RoPE, MLPs, MoE and its router; each calls its ops through the op table
(op_table.py) its model resolved when built, the Triton kernels of kernels/ on CUDA."""
