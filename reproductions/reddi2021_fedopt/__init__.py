"""Reddi et al. 2021, Adaptive Federated Optimization: published settings, results, presets."""
