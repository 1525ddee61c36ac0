"""Tests of tff_adaptive.datasets."""
