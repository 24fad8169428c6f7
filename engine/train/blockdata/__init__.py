"""Block-drafter training data at scale: sources, feature shards, the extractor, training from shards."""
