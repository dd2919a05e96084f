"""Benchmarks: each prints its figures next to an alternative measured in the same run."""
