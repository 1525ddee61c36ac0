"""Tests of tff_adaptive.aggregators (and DP noise as delivered)."""
