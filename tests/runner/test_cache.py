"""The gallery embedding cache: hit, invalidation, atomic writes."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

from recallkit.runner.cache import EmbeddingCache, cache_key
from recallkit.runner.encode import Encoding
from recallkit.runner.encoders import Encoder


def _run(cli, hand_case, module_name, cache, *extra):
    query, gallery = hand_case
    return cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{module_name}:mean_rgb",
        "--ks",
        "1",
        "2",
        "--cache-dir",
        cache,
        *extra,
    )


def _calls(module_name):
    return importlib.import_module(module_name).CALLS["images"]


def test_hit_skips_encoding_and_is_reported(cli, hand_case, encoder_module, tmp_path):
    name, _ = encoder_module
    cache = tmp_path / "cache"
    first = _run(cli, hand_case, name, cache)
    assert first.rc == 0, first.err
    assert "gallery embeddings: cache miss" in first.err
    # Not a terminal: one summary line per encoded set instead of a progress bar.
    assert "encoding gallery: 4 images in" in first.err and "images/s)" in first.err
    assert _calls(name) == 7  # 4 gallery + 3 query images
    entries = sorted(p.name for p in cache.iterdir())
    assert len([e for e in entries if e.endswith(".npy")]) == 2  # gallery and query
    assert not [e for e in entries if e.endswith(".tmp")]

    second = _run(cli, hand_case, name, cache)
    assert second.rc == 0, second.err
    assert "gallery embeddings: cache hit" in second.err
    assert "query embeddings: cache hit" in second.err
    assert _calls(name) == 7  # nothing re-encoded
    assert second.out == first.out


def test_cached_array_is_the_encoder_output(cli, hand_case, encoder_module, tmp_path):
    name, _ = encoder_module
    cache = tmp_path / "cache"
    assert _run(cli, hand_case, name, cache).rc == 0
    arrays = [np.load(p) for p in cache.glob("*.npy")]
    gallery = next(a for a in arrays if len(a) == 4)
    # Mean RGB of the gallery images in folder order (conftest.hand_case).
    expected = np.array([[255, 0, 0], [0, 255, 0], [200, 50, 0], [0, 0, 255]], np.float32)
    np.testing.assert_array_equal(gallery, expected)


def test_touching_an_image_invalidates(cli, hand_case, encoder_module, tmp_path):
    name, _ = encoder_module
    cache = tmp_path / "cache"
    assert _run(cli, hand_case, name, cache).rc == 0
    _, gallery = hand_case
    target = gallery / "dog" / "a.png"
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    res = _run(cli, hand_case, name, cache)
    assert "gallery embeddings: cache miss" in res.err
    assert "query embeddings: cache hit" in res.err
    assert _calls(name) == 7 + 4


def test_changing_the_callable_source_invalidates(cli, hand_case, encoder_module, tmp_path):
    name, path = encoder_module
    cache = tmp_path / "cache"
    assert _run(cli, hand_case, name, cache).rc == 0
    path.write_text(path.read_text() + "\n# a new version of the encoder\n")
    res = _run(cli, hand_case, name, cache)
    assert "gallery embeddings: cache miss" in res.err


def test_changing_ks_keeps_the_cache(cli, hand_case, encoder_module, tmp_path):
    # K is not part of the key (the embeddings do not depend on it); the device type is.
    name, _ = encoder_module
    cache = tmp_path / "cache"
    assert _run(cli, hand_case, name, cache).rc == 0
    res = _run(cli, hand_case, name, cache, "--ks", "1")
    assert "gallery embeddings: cache hit" in res.err


def test_no_cache_writes_nothing(cli, hand_case, encoder_module, tmp_path):
    name, _ = encoder_module
    cache = tmp_path / "cache"
    res = _run(cli, hand_case, name, cache, "--no-cache")
    assert res.rc == 0, res.err
    assert not cache.exists()


def test_key_covers_every_field(tmp_path):
    f = tmp_path / "a.png"
    f.write_bytes(b"x")
    base = Encoder(lambda b: b, "enc", "w1", {"crop": 224}, "float32", "cpu")
    key = cache_key([f], base)
    variants = [
        Encoder(lambda b: b, "enc2", "w1", {"crop": 224}, "float32", "cpu"),
        Encoder(lambda b: b, "enc", "w2", {"crop": 224}, "float32", "cpu"),
        Encoder(lambda b: b, "enc", "w1", {"crop": 200}, "float32", "cpu"),
        Encoder(lambda b: b, "enc", "w1", {"crop": 224}, "float16", "cpu"),
        Encoder(lambda b: b, "enc", "w1", {"crop": 224}, "float32", "cuda"),
    ]
    keys = {cache_key([f], v) for v in variants}
    assert key not in keys and len(keys) == len(variants)
    assert cache_key([f], base) == key
    f.write_bytes(b"xy")  # size changes
    assert cache_key([f], base) != key


def test_interrupted_write_leaves_no_entry(tmp_path, monkeypatch):
    cache = EmbeddingCache(tmp_path / "c")
    encoding = Encoding(np.ones((3, 2), np.float32), np.ones(3, bool), (), 0.0)

    def broken_save(handle, array, allow_pickle=False):
        handle.write(b"\x93NUMPY half")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        cache.store("k", encoding, {})
    monkeypatch.undo()
    assert not (tmp_path / "c" / "k.npy").exists()
    assert cache.load("k", 3) is None
    assert not list((tmp_path / "c").glob("*.tmp"))
    cache.store("k", encoding, {})
    loaded = cache.load("k", 3)
    np.testing.assert_array_equal(loaded.embeddings, encoding.embeddings)


def test_entry_of_the_wrong_size_is_a_miss(tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.store("k", Encoding(np.ones((3, 2), np.float32), np.ones(3, bool), (), 0.0), {})
    assert cache.load("k", 4) is None
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    assert cache.load("bad", 1) is None


def test_python_api_cache(tmp_path, make_image):
    from recallkit import runner

    paths = [make_image(tmp_path / f"{i}.png", (i + 1, 0, 0)) for i in range(3)]
    calls = []

    def encoder(batch):
        calls.append(len(batch))
        return np.stack([np.asarray(im, dtype=np.float32).reshape(-1, 3).mean(0) for im in batch])

    kwargs = dict(cache_dir=tmp_path / "cache", progress=False, ks=(1,))
    first = runner.evaluate(paths, [0, 0, 1], paths, [0, 0, 1], encoder, **kwargs)
    second = runner.evaluate(paths, [0, 0, 1], paths, [0, 0, 1], encoder, **kwargs)
    # Leave-one-out by path: encoded once (query = gallery), the second run is a cache hit.
    assert calls == [3]
    assert first.first_hit_ranks.tolist() == second.first_hit_ranks.tolist() == [0, 0, -1]
