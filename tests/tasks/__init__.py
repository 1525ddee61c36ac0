"""Tests of tff_adaptive.tasks."""
