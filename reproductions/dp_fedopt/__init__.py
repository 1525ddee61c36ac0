"""User-level DP with adaptive servers and quantised uploads on Fashion-MNIST (no paper's table)."""
