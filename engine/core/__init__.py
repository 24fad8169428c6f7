"""Decode primitives: the Target protocol, the LM wrapper (croppable cache, reduced head), the KV cache that
grows in place, sampling and tree attention. Loading a model by name is engine.models; how its linears and
attention compute (our C kernels, quantized layers, the one `accelerate()` switch) is engine.kernels."""
