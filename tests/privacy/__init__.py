"""Tests of tff_adaptive.privacy."""
