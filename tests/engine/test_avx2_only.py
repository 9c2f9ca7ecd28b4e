"""The int8 filter on the kernels of an AVX2-only CPU, here through ``benchmarks/avx2_only.py``
(the wider instructions hidden from CPUID, so that ONNX Runtime's MLAS takes its AVX2 kernel, the
one that adds pairs of ``u8 × s8`` products into a saturating int16).

There, full 8-bit codes on the unsigned side come out wrong: the self-check refuses such a kernel
(on a CPU with VNNI the same kernel is exact), the engine's 7-bit codes are exact, and every
precision gives the brute-force values even with the saturating kernel offered first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import avx2_only
from tests import brute

ROOT = Path(__file__).resolve().parents[2]
REASON = avx2_only.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"avx2_only: {REASON}")

CHILD = r"""
import json, sys
import numpy as np
import recallkit
from recallkit.engine import cpu, lowp

ORT = lowp.KERNELS["onnxruntime"]


class FullCodes(lowp.OnnxInt8):
    '''The same MLAS kernel with 8-bit codes on the unsigned side (zero point 128).'''

    name, a_form, zero_point = "ort-full-codes", "int8", 128

    def product(self, a, b, out, a0, a1, b0, b1):
        codes = (a.codes.numpy()[a0:a1].astype(np.int16) + 128).astype(np.uint8)
        inputs = {"A": codes, "B": b.columns(b0, b1),
                  "b_scale": np.ascontiguousarray(b.scale32[b0:b1])}
        out[...] = self._session().run(None, inputs)[0]


full = FullCodes()
out = {"ort": [lowp.check_int8(ORT, w) for w in (16, 100, 128, 512)],
       "full": [lowp.check_int8(full, w) for w in (16, 128)]}
lowp.KERNELS = {full.name: full, **lowp.KERNELS}  # offered before the exact kernel
calls = []
ort_product = ORT.product
ORT.product = lambda *a: calls.append(1) or ort_product(*a)
x = np.load(sys.argv[1])
labels = np.load(sys.argv[2])
for precision in ("int8", "float32"):
    r = recallkit.recall_at_k(x, x, labels, labels, (1, 2, 4, 8), query_in_reference=True,
                              precision=precision)
    m = recallkit.map_at_r(x, x, labels, labels, query_in_reference=True, precision=precision)
    out[precision] = {"recall": {k: float(v) for k, v in r.items()}, "map": float(m)}
out["ort_tiles"] = len(calls)
out["report"] = cpu.precision_report(x.shape[1])
print(json.dumps(out))
"""


def test_the_avx2_int8_kernel_saturates_full_codes_and_the_engine_stays_exact(tmp_path):
    rng = np.random.default_rng(5)
    n, d = 700, 128
    labels = rng.integers(0, 70, n)
    centres = rng.standard_normal((70, d))
    x = centres[labels] + 1.2 * rng.standard_normal((n, d))
    x = (np.round(x * 4) / 4).astype(np.float32)  # coarse values: exact ties between items
    x[1::50] = x[0::50]  # and duplicate rows
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "labels.npy", labels)
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/avx2_only.py",
            "-c",
            CHILD,
            str(tmp_path / "x.npy"),
            str(tmp_path / "labels.npy"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "torch AVX2" in done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["ort"] == [None] * 4  # 7-bit codes: no pair of products reaches 2^15
    for reason in out["full"]:
        assert reason is not None and "differ from the exact product" in reason
    assert "ort-full-codes (int8): not exact" in out["report"]
    assert "torch-int8 (int8): no int8 instructions here" in out["report"]
    assert out["ort_tiles"] > 0  # int8 tiles ran on the exact kernel

    s = brute.scores64(x, x, "cosine")
    excluded = brute.excluded_sets(n, n, query_in_reference=True)
    want = brute.recall(brute.first_hit_ranks(s, labels, labels, excluded), (1, 2, 4, 8))
    want_map = np.mean(
        [ap for r, _, ap in brute.top_r_metrics(s, labels, labels, excluded) if r > 0]
    )
    for precision in ("int8", "float32"):
        assert out[precision]["recall"] == want
        assert out[precision]["map"] == pytest.approx(want_map, rel=1e-12)
    assert out["int8"]["map"] == out["float32"]["map"]
