"""Tests of tff_adaptive.engines."""
