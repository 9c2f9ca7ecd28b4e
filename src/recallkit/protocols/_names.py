"""Names of the protocols' tasks, categories and tie rules, in a module that imports nothing
heavy (the command line's help lists them)."""

from __future__ import annotations

FASHIONIQ_CATEGORIES = ("dress", "shirt", "toptee")
"""The FashionIQ categories (Wu et al. 2021)."""
GENECIS_TASKS = ("focus_attribute", "change_attribute", "focus_object", "change_object")
"""The GeneCIS tasks (Vaze et al. 2023)."""
#: GeneCIS tie conventions -> what each means.
TIES = {
    "pessimistic": "per-sample gallery [target, *gallery]; ties: target ranks below equal "
    "distractors",
    "official": "per-sample gallery [target, *gallery]; ties: column order, target first "
    "(official script)",
}
