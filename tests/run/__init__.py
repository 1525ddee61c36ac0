"""Tests of the trainer and its programs (run/, tff_adaptive.run)."""
