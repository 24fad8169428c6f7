"""Model loading: `load_model` / `check_pair` by name (load), each model of a pair on its weights path
(pair_weights), offline provisioning and the bundled pairs (provision, smollm, tiny), the reduced vocabulary
(vocab_subset), the GGUF types of the quantized path (gguf_types) and the ShareGPT prompts (sharegpt).
Stands on engine.core (the wrapper a loaded model is handed to) and engine.kernels (`accelerate`)."""
