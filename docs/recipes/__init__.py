"""Executable recipes: copyable evaluation code that runs on synthetic data and is tested."""
