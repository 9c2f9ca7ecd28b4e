"""No process-wide side effects: every thread's BLAS, OpenMP and torch thread settings are as they
were after recall@K calls, concurrent ones from several threads and calls that raise mid-way.

The engine limits BLAS and torch to one thread while its tiles run; these tests check that the
limit is taken and given back for the whole process and for each calling thread (torch's and
OpenMP's thread counts are per thread; a new thread starts from torch's default), whatever the
order in which concurrent calls start and finish. Expected values come from ``tests/brute.py``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from recallkit import recall_at_k
from recallkit.engine import cpu, cpu_kernels
from tests import brute


def settings(per_thread: bool = False) -> dict:
    """The calling thread's view: torch's intra-op threads and every library's thread count
    (``per_thread``: only OpenMP's, which is the thread's own; OpenBLAS's pool is the
    process's, limited while any other thread's call runs)."""
    libraries = {
        i["filepath"]: (i["internal_api"], i["num_threads"])
        for i in threadpool_info()
        if not per_thread or i["internal_api"] == "openmp"
    }
    mkl = cpu_kernels.torch_mkl()  # torch's own MKL: its count is the thread's once it sets one
    libraries["torch's MKL"] = None if mkl is None else mkl.MKL_Get_Max_Threads()
    return {"torch": torch.get_num_threads(), "libraries": libraries}


def same(after: dict, before: dict) -> bool:
    """Whether ``after`` holds ``before``'s settings (a library loaded since is no setting)."""
    changed = {
        k: (v, after["libraries"].get(k))
        for k, v in before["libraries"].items()
        if after["libraries"].get(k) != v
    }
    if after["torch"] != before["torch"]:
        changed["torch"] = (before["torch"], after["torch"])
    assert not changed, changed
    return True


def new_thread_settings() -> dict:
    """What a thread started now sees (torch's default for new threads)."""
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(settings()))
    thread.start()
    thread.join()
    return seen


def _data(seed: int, n: int = 1500, m: int = 3000, d: int = 16):
    rng = np.random.default_rng(seed)
    query = rng.standard_normal((n, d)).astype(np.float32)
    reference = rng.standard_normal((m, d)).astype(np.float32)
    return query, reference, rng.integers(0, 20, n), rng.integers(0, 20, m)


def _first_hits(query, reference, q_labels, r_labels):
    """First-hit ranks from the exact scores, by a full stable sort (ties: lower index)."""
    s = brute.fixed_order_scores64(query, reference, "cosine")
    index = np.broadcast_to(np.arange(s.shape[1]), s.shape)
    order = np.lexsort((index, -s), axis=1)
    hit = r_labels[order] == np.asarray(q_labels)[:, None]
    return np.where(hit.any(axis=1), hit.argmax(axis=1), -1)


def test_settings_are_restored_after_concurrent_calls(backend):
    cases = [_data(seed) for seed in range(4)]
    before_main, before_new = settings(), new_thread_settings()
    assert before_main["torch"] == 2  # tests/cpu.env: two threads, so a limit of 1 shows
    start = threading.Barrier(4)
    seen: dict[int, tuple] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            mine = settings(per_thread=True)
            start.wait()
            ranks = []
            for chunk in (None, 256):  # several limited regions per thread, interleaved
                q, r, ql, rl = cases[i]
                result = recall_at_k(q, r, ql, rl, ks=(1, 10), chunk_size=chunk)
                ranks.append(result.first_hit_ranks)
            seen[i] = (mine, settings(per_thread=True), ranks)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i, (mine, after, ranks) in seen.items():
        assert same(after, mine), (i, after, mine)
        want = _first_hits(*cases[i])
        for got in ranks:
            np.testing.assert_array_equal(got, want)
    assert same(settings(), before_main)
    assert same(new_thread_settings(), before_new)


def test_settings_are_restored_whatever_the_order_of_entry_and_exit():
    # The calling thread enters the limit first and leaves it first, while another call (from
    # another thread) is still inside; a thread started meanwhile starts from the defaults.
    before_main, before_new = settings(), new_thread_settings()
    inside, release = threading.Event(), threading.Event()
    helper_seen = {}

    def helper() -> None:
        mine = settings(per_thread=True)
        inside.wait(60)
        with cpu.single_threaded():
            helper_seen["during"] = settings(per_thread=True)
            release.wait(60)
        helper_seen.update(before=mine, after=settings(per_thread=True))

    thread = threading.Thread(target=helper)
    thread.start()
    with cpu.single_threaded():
        started_inside = new_thread_settings()
        inside.set()
        while cpu_kernels.LIMIT_STATE["users"] < 2:  # until the helper holds the limit too
            threading.Event().wait(0.001)
    started_while_helper_inside = new_thread_settings()
    main_after = settings(per_thread=True)
    release.set()
    thread.join()
    assert same(helper_seen["after"], helper_seen["before"])
    assert same(helper_seen["during"], helper_seen["before"])  # a caller's own are untouched
    assert same(main_after, settings(per_thread=True))
    assert same(settings(), before_main)
    assert same(new_thread_settings(), before_new)
    for seen in (started_inside, started_while_helper_inside):
        assert seen["torch"] == before_new["torch"]


class Interrupted(Exception):
    """Raised from inside the engine's pass, as an interrupt or a failed allocation would be."""


def test_settings_are_restored_after_a_call_that_raises_mid_way(backend, monkeypatch):
    query, reference, q_labels, r_labels = _data(5, n=600, m=5000)
    before_main, before_new = settings(), new_thread_settings()
    calls, active, late = [], [], []
    failed = threading.Event()
    # The third filter product of the call raises, after the first ones were scored: inside
    # the engine's limited region. On the CPU tiles (5,000 columns: five tiles a chunk, two
    # workers) the second tile waits until the third has failed, so that the other worker is
    # busy when the error happens and tiles are left in the queue.
    if backend == "numba":
        module, name = cpu, "tile_scores"
    else:
        from recallkit.engine import device

        module, name = device.TorchKernels, "product"
    original = getattr(module, name)
    lock = threading.Lock()

    def failing(*args, **kwargs):
        with lock:
            calls.append(1)
            number = len(calls)
            if failed.is_set():
                late.append(number)
            active.append(number)
        try:
            if number == 3:
                failed.set()
                raise Interrupted("mid-way")
            if number == 2 and backend == "numba":
                failed.wait(30)
            return original(*args, **kwargs)
        finally:
            with lock:
                active.remove(number)

    monkeypatch.setattr(module, name, failing)
    with pytest.raises(Interrupted):
        recall_at_k(
            query, reference, q_labels, r_labels, ks=(1,), chunk_size=200, precision="float32"
        )
    # Every worker was done when the error reached the caller, and none took a tile after it.
    assert not active
    assert not late
    assert same(settings(), before_main)
    assert same(new_thread_settings(), before_new)
    monkeypatch.setattr(module, name, original)
    # A later call is unaffected.
    result = recall_at_k(query, reference, q_labels, r_labels, ks=(1,))
    np.testing.assert_array_equal(
        result.first_hit_ranks, _first_hits(query, reference, q_labels, r_labels)
    )
    assert same(settings(), before_main)


def test_a_blas_limit_of_the_callers_own_still_works_after_a_call():
    # threadpoolctl lets one thread at a time control OpenBLAS's process-wide pool: after a
    # call, the engine must hold no such control, so a limit of the caller's own takes effect
    # from any thread.
    query, reference, q_labels, r_labels = _data(6, n=300, m=1200)
    recall_at_k(query, reference, q_labels, r_labels, ks=(1,))
    now = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    target = 1 if now != {1} else 2  # a limit that changes something
    seen = []

    def user() -> None:
        with threadpool_limits(limits=target, user_api="blas"):
            seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    thread = threading.Thread(target=user)
    thread.start()
    thread.join()
    assert seen == [{target}]


def test_a_tile_worker_runs_torchs_mkl_on_one_thread():
    # threadpoolctl does not see the MKL linked into torch: without a count of its own, each
    # worker's float32 torch.mm ran on MKL_NUM_THREADS threads (two workers: four on two cores).
    mkl = cpu_kernels.torch_mkl()
    if mkl is None:
        pytest.skip("this torch build has no MKL of its own")
    before, before_new = settings(), new_thread_settings()
    assert before["libraries"]["torch's MKL"] == 2  # tests/cpu.env: MKL_NUM_THREADS=2
    workers = cpu_kernels.pool(2)
    seen = [workers.submit(lambda: settings(per_thread=True)) for _ in range(4)]
    assert {s.result()["libraries"]["torch's MKL"] for s in seen} == {1}
    assert same(settings(), before)
    assert same(new_thread_settings(), before_new)
