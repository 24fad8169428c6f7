"""Offline analysis: the hindsight reference, the one replay of window policies, the cost model."""
