"""Benchmarks of tff-adaptive: `python -m benchmarks.round_time` times a federated round."""
