"""Tests of tff_adaptive.runtime."""
