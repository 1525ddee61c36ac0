"""Tests of tff_adaptive.loop."""
