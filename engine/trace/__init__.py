"""The trace: format (schema v1), checks, fast loaders, Perfetto export, prompts and JSON I/O."""
