"""Spark audit of the metadata log."""
