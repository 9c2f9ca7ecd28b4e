"""Run a script as on a CPU with AVX2 and no AVX-512, VNNI, BF16 or AMX (AMD Zen 2 and Zen 3),
on an x86 Linux machine that has those: every library then runs the kernels it runs there.

    uv run --frozen --no-sync --env-file tests/cpu.env \\
        python benchmarks/avx2_only.py benchmarks/bench_recall.py --scale sop
    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/avx2_only.py -c "..."

``cpuid_mask.c`` (compiled here with ``cc`` into ``build/``, preloaded) hides those instructions
from the CPUID instruction, so that MKL and OpenBLAS take their AVX2 GEMMs, torch its AVX2
kernels, oneDNN and ONNX Runtime's MLAS their AVX2 int8 kernels (which add pairs of ``u8 × s8``
products into a saturating int16, where VNNI's do not), and numba compiles for ``znver3``
(``NUMBA_CPU_NAME``; its cache goes to ``build/numba-<cpu>``). recallkit's own view of the
instruction sets (:func:`recallkit.engine.lowp.cpu_flags`, read from ``/proc/cpuinfo``) is masked
the same way. The kernels are the AVX2 ones; the processor is not: the times measure them on this
machine's cores, caches and memory, not a Zen 3's. It needs Linux's CPUID faulting (the
``cpuid_fault`` flag: Intel since Ivy Bridge, and virtual machines that pass it on) and a C
compiler; without them it says so and exits with status 2.
"""

from __future__ import annotations

import hashlib
import os
import platform
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(__file__).with_name("cpuid_mask.c")
BUILD = ROOT / "build"
MARK = "RECALLKIT_AVX2_ONLY"
HIDDEN = ("avx512", "amx", "avx_vnni", "avx_ifma", "avx_ne_convert", "avx10")
"""``/proc/cpuinfo`` flags that ``cpuid_mask.c`` hides (by prefix)."""


def fail(message: str) -> None:
    """One line on stderr, exit status 2."""
    print(f"avx2_only: {message}", file=sys.stderr)
    raise SystemExit(2)


def unavailable() -> str | None:
    """Why the mask cannot run here, or ``None``."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"needs Linux on x86-64 (this is {sys.platform} on {platform.machine()})"
    from recallkit.engine import lowp

    flags = lowp.cpu_flags()
    if "avx2" not in flags:
        return "this CPU has no AVX2"
    if "cpuid_fault" not in flags:
        return "this CPU or virtual machine offers no CPUID faulting (no 'cpuid_fault' flag)"
    if compiler() is None:
        return "no C compiler (cc, gcc or clang) on PATH"
    return None


def compiler() -> str | None:
    return next(
        (c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None
    )


def build() -> Path:
    """``build/cpuid_mask-<hash of the source>.so``, compiled if missing."""
    text = SOURCE.read_bytes()
    target = BUILD / f"cpuid_mask-{hashlib.sha256(text).hexdigest()[:12]}.so"
    if not target.exists():
        BUILD.mkdir(exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        cmd = [compiler() or "cc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            partial.unlink(missing_ok=True)
            fail(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
        partial.replace(target)
    return target


def environment() -> dict[str, str]:
    """The environment a child process runs in as an AVX2-only CPU."""
    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{build()} {preload}".strip()
    env.setdefault("NUMBA_CPU_NAME", "znver3")
    env.setdefault("NUMBA_CACHE_DIR", str(BUILD / f"numba-{env['NUMBA_CPU_NAME']}"))
    env.pop("PYTHONFAULTHANDLER", None)  # its SIGSEGV handler would take the CPUID faults
    env[MARK] = "1"
    return env


def masked() -> None:
    """In the child: check that the libraries see AVX2 only, and mask recallkit's flags."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability != "AVX2":
        fail(f"torch still sees {capability}: the CPUID mask did not apply")
    from recallkit.engine import lowp

    flags = lowp.cpu_flags

    def avx2_flags() -> frozenset[str]:
        return frozenset(f for f in flags() if not f.startswith(HIDDEN))

    lowp.cpu_flags = avx2_flags
    print(
        f"avx2_only: AVX-512, VNNI, BF16 and AMX hidden from CPUID; torch {capability}; "
        f"numba compiles for {os.environ.get('NUMBA_CPU_NAME')}",
        file=sys.stderr,
    )


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    if os.environ.get(MARK) != "1":
        reason = unavailable()
        if reason:
            fail(reason)
        env = environment()
        os.execve(sys.executable, [sys.executable, __file__, *argv], env)
    masked()
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<avx2_only -c>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = argv
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
