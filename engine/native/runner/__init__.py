"""Runs one scheduled step on the device: the batch tensors, the model forward, CUDA graphs
for decode, the sampler, the paged cache tensors and the vision rows."""
