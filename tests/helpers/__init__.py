"""Helpers shared by the test modules (the modules never import one another)."""
