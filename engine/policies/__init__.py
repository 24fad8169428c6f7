"""Window policies: the interface and registry (base), simple rules, the hindsight oracle, PACER."""
