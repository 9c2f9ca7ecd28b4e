"""Run files: what ``recallkit evaluate`` writes and ``report``, ``compare`` and ``plot`` read.

- [`records`][recallkit.runfiles.records]: writing, reading and checking run and history files
  against the JSON Schemas shipped in ``schemas/``;
- ``definitions``: the definitions record, how each value was computed;
- [`_atomic`][recallkit.runfiles._atomic]: files written whole or not at all, and appends that lose
  no record when two runs share a file.
"""
