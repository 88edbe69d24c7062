"""Checkpoints in and out: safetensors (M3, Llama) and GGUF weights, the vision tower, the
tokenizer that goes with a model path, and random tiny M3 checkpoints for tests."""
