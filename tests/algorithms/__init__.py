"""Tests of tff_adaptive.algorithms."""
