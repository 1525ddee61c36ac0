"""Tests of the reproductions (reproductions/)."""
