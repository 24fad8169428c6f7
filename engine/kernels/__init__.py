"""How a model's linears and attention compute on CPU: our C kernels (qgemm.c, bf16_kernels.c) and their build
(kernel_build: at install and on first use), the quantized layers, row-wise attention, fused decoder layers,
and the one switch onto them, `accelerate(model, weights, …) -> KernelReport`. Imports no other engine
package: the decode primitives (engine.core) and model loading (engine.models) stand on it."""
