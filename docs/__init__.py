"""Documentation that executes: the recipes in docs/recipes run as ``python -m docs.recipes.*``."""
