"""What comes in: the library's checks of its arguments, labels and ids as dense codes, files
pinned while they are read, and arrays read from disk.

Internal: the public functions call these at their boundary; nothing here is part of the API.

- [`checks`][recallkit._inputs.checks]: validation helpers that raise ``ValueError`` naming the
  argument;
- [`codes`][recallkit._inputs.codes]: labels and ids as dense int64 codes, compared by value;
- [`pinned`][recallkit._inputs.pinned]: files and memory maps held unchanged while a call reads
  them;
- [`io`][recallkit._inputs.io]: ``.npy``, ``.npz``, ``.pt`` and ``.safetensors`` arrays, and the
  array-likes the library accepts.
"""
