"""Tests of tff_adaptive.optimizers."""
