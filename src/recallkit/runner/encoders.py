"""Encoders: a torchvision model by name with local weights, any ``package.module:callable``,
any Python function, or precomputed embeddings read from ``.npy``, ``.pt`` or ``.safetensors``.

An [`Encoder`][Encoder] is an ``encoder_fn`` (a batch of RGB images to a ``(batch, dim)`` array)
together with what identifies its output for the embedding cache: a name, a digest of its
weights, its preprocessing, its compute dtype and device.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import inspect
import io
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from recallkit._inputs.pinned import FileChanged, read_file
from recallkit._loading import MissingExtraError, require
from recallkit.exceptions import RunnerError
from recallkit.runner.defaults import DTYPE_NAMES, IMAGENET_MEAN, IMAGENET_STD
from recallkit.runner.encode import pil_image

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
#: The seed of torch's generator for a randomly initialised torchvision model (``--random-init``).
RANDOM_INIT_SEED = 0


@dataclass(frozen=True)
class Preprocessing:
    """Resize (shorter side), center crop, then normalise each channel: ``(x - mean) / std``.

    ``resize`` or ``crop`` of ``None`` skips that step. The defaults are torchvision's ImageNet
    evaluation transform.

    >>> from PIL import Image
    >>> Preprocessing(resize=8, crop=4).transform()(Image.new("RGB", (16, 8))).shape
    torch.Size([3, 4, 4])
    """

    resize: int | None = 256
    crop: int | None = 224
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def transform(self) -> Callable[[Any], torch.Tensor]:
        """The torchvision transform: a PIL image to a normalised ``(3, H, W)`` tensor."""
        require("The image preprocessing (torchvision transforms)", "torchvision", extra="images")
        from torchvision import transforms

        steps: list[Any] = []
        if self.resize:
            steps.append(transforms.Resize(self.resize))
        if self.crop:
            steps.append(transforms.CenterCrop(self.crop))
        steps += [transforms.ToTensor(), transforms.Normalize(self.mean, self.std)]
        return transforms.Compose(steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resize": self.resize,
            "crop": self.crop,
            "mean": list(self.mean),
            "std": list(self.std),
        }


@dataclass(frozen=True)
class Encoder:
    """An ``encoder_fn`` with the identity of its output (what the embedding cache is keyed by).

    ``keyed_by`` says what ``identity`` and ``digest`` can see of the output: ``"weights"``
    (a weights file or the state of the torch modules it holds), ``"encoder_id"`` (a name the
    user gave), ``"source"`` (only the name and source file of a function) or ``"name"``
    (only the name). With ``"source"`` or ``"name"`` a function whose output depends on
    anything else (weights it loads itself, environment variables) needs an ``encoder_id``.
    """

    fn: Callable[[list[Any]], Any]
    identity: str
    digest: str | None = None
    preprocessing: dict[str, Any] | None = None
    dtype: str = "float32"
    device: str = "cpu"
    info: dict[str, Any] = field(default_factory=dict)
    keyed_by: str = "weights"

    def __call__(self, batch: list[Any]) -> Any:
        return self.fn(batch)

    def key_fields(self) -> dict[str, Any]:
        """Everything about the encoder that changes its embeddings."""
        return {
            "encoder": self.identity,
            "weights_digest": self.digest,
            "preprocessing": self.preprocessing,
            "dtype": self.dtype,
            "device": torch.device(self.device).type,
        }

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description, for reports and run files."""
        return {**self.key_fields(), "keyed_by": self.keyed_by, **self.info}


def resolve_device(device: str | None) -> str:
    """``"auto"`` or ``None`` -> ``"cuda"`` when available, else ``"cpu"``; otherwise checked.

    >>> resolve_device("cpu")
    'cpu'
    """
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise RunnerError(f"Unknown device {device!r} (use cpu, cuda, cuda:N or auto).") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise RunnerError(f"Device {device!r} was asked for but CUDA is not available.")
    return str(parsed)


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, hex.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "w"
    >>> _ = p.write_bytes(b"abc")
    >>> file_digest(p)[:16]
    'ba7816bf8f01cfea'
    """
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def state_digest(module: nn.Module) -> str:
    """SHA-256 over a module's state dict: every name, dtype, shape and the raw bytes.

    >>> a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    >>> _ = b.load_state_dict(a.state_dict())
    >>> state_digest(a) == state_digest(b), state_digest(a) == state_digest(nn.Linear(2, 3))
    (True, False)
    """
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _modules_behind(fn: Any) -> list[nn.Module]:
    """The torch modules an encoder function uses: itself, its ``self``, its closure, attributes."""
    found: list[nn.Module] = []
    candidates = [fn, getattr(fn, "__self__", None)]
    for cell in getattr(fn, "__closure__", None) or ():
        with contextlib.suppress(ValueError):
            candidates.append(cell.cell_contents)
    if not inspect.isfunction(fn) and not inspect.ismethod(fn) and hasattr(fn, "__dict__"):
        candidates += list(vars(fn).values())
    for c in candidates:
        if isinstance(c, nn.Module) and all(c is not f for f in found):
            found.append(c)
    return found


def _source_digest(fn: Any) -> str | None:
    module = inspect.getmodule(fn if not hasattr(fn, "__self__") else type(fn.__self__))
    if module is None:
        module = inspect.getmodule(type(fn))
    try:
        source = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        source = None
    return file_digest(source) if source and os.path.isfile(source) else None


def _function_key(fn: Any) -> tuple[str | None, str]:
    """``(digest, keyed_by)`` of an encoder function (see [`Encoder`][Encoder])."""
    parts = [state_digest(m) for m in _modules_behind(fn)]
    keyed_by = "weights" if parts else "source"
    source = _source_digest(fn)
    if source:
        parts.append(source)
    if not parts:
        return None, "name"
    return hashlib.sha256("|".join(parts).encode()).hexdigest(), keyed_by


def _with_id(identity: str, encoder_id: str | None) -> str:
    if encoder_id is None:
        return identity
    if not isinstance(encoder_id, str) or not encoder_id.strip():
        raise RunnerError(f"--encoder-id takes a non-empty name. Got {encoder_id!r}.")
    return f"{identity}|encoder-id={encoder_id}"


def function_encoder(fn: Callable[[list[Any]], Any], encoder_id: str | None = None) -> Encoder:
    """Wrap a user's ``encoder_fn``: its identity is ``encoder_id`` or its qualified name.

    >>> def embed(batch):
    ...     return [[1.0, 0.0]] * len(batch)
    >>> function_encoder(embed).identity, function_encoder(embed, "ckpt-7").identity
    ('function:recallkit.runner.encoders:embed', 'ckpt-7')
    """
    if isinstance(fn, Encoder):
        return fn
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    identity = encoder_id or f"function:{module}:{name}"
    digest, keyed_by = _function_key(fn)
    if encoder_id:
        keyed_by = "encoder_id"
    return Encoder(fn, identity, digest, None, "float32", "cpu", keyed_by=keyed_by)


def _forward(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    if isinstance(out, tuple | list):
        out = out[0]
    if hasattr(out, "logits") and not isinstance(out, torch.Tensor):
        out = out.logits
    if not isinstance(out, torch.Tensor):
        raise RunnerError(
            f"The model returned {type(out).__name__}, not a tensor; wrap it in a function "
            "that returns the embedding tensor."
        )
    return out.reshape(out.shape[0], -1)


def module_encoder(
    model: nn.Module,
    transform: Callable[[Any], torch.Tensor],
    *,
    identity: str,
    digest: str | None,
    preprocessing: dict[str, Any] | None,
    device: str = "cpu",
    dtype: str = "float32",
    info: dict[str, Any] | None = None,
) -> Encoder:
    """An [`Encoder`][Encoder] running ``model`` in eval mode on ``transform``-ed images.

    Its cache key sees the weights through ``digest`` (``keyed_by="weights"``).
    """
    torch_dtype = DTYPES[dtype]
    model = model.eval().to(device=device, dtype=torch_dtype)

    def encode(images: list[Any]) -> np.ndarray:
        batch = torch.stack([transform(image) for image in images])
        try:
            with torch.inference_mode():
                out = _forward(model, batch.to(device=device, dtype=torch_dtype))
        except RuntimeError as error:  # a shape or dtype the model does not take
            first = str(error).strip().splitlines()[0] if str(error).strip() else "RuntimeError"
            raise RunnerError(
                f"The model {identity} failed on a batch of shape {tuple(batch.shape)} "
                f"({dtype} on {device}): {first}"
            ) from None
        return out.to("cpu", torch.float32).numpy()

    return Encoder(encode, identity, digest, preprocessing, dtype, device, info or {})


def _read_state_dict(path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The state dict of a weights file and the SHA-256 of the bytes it was read from (the
    file is read once, through one descriptor, checked unchanged after the read)."""
    if not path.is_file():
        raise RunnerError(f"The weights file '{path}' does not exist.")
    try:
        data = read_file(path, f"The weights file '{path}'")
        if path.suffix.lower() == ".safetensors":
            require(f"Reading the weights file '{path}'", "safetensors", extra="images")
            from safetensors.torch import load

            state: Any = load(data)
        else:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (FileChanged, MissingExtraError):
        raise
    except Exception as error:
        message = f"The weights file '{path}' cannot be read: {error}".rstrip(".")
        raise RunnerError(message + ".") from None
    for wrapper in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RunnerError(f"The weights file '{path}' does not hold a state dict of tensors.")
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module.") :]: v for k, v in state.items()}
    return state, hashlib.sha256(data).hexdigest()


def _find_head(model: nn.Module) -> tuple[nn.Module, str | int, str] | None:
    """The last classification layer: ``(parent, attribute or index, state-dict prefix)``."""
    for attr in ("fc", "classifier", "heads", "head"):
        head = getattr(model, attr, None)
        if isinstance(head, nn.Linear):
            return model, attr, f"{attr}."
        if isinstance(head, nn.Sequential):
            linear = [i for i, m in enumerate(head) if isinstance(m, nn.Linear)]
            if linear:
                name = list(head._modules)[linear[-1]]
                return head, linear[-1], f"{attr}.{name}."
    return None


def torchvision_encoder(
    name: str,
    weights: str | os.PathLike[str] | None = None,
    *,
    random_init: bool = False,
    preprocessing: Preprocessing | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    head: str = "drop",
    encoder_id: str | None = None,
) -> Encoder:
    """A torchvision model by name (``torchvision.models.get_model``) with a local state dict.

    ``weights`` is the state dict's file; with ``random_init=True`` (and no ``weights``) the
    model keeps the random initialisation torchvision gives it, drawn from torch's generator
    seeded with [`RANDOM_INIT_SEED`][RANDOM_INIT_SEED] (the caller's generator is left as it was): a
    baseline without a weights file, the same weights and embeddings on every run.
    ``head="drop"`` replaces the last linear classification layer (``fc``, ``classifier``,
    ``heads``, ``head``) by the identity, so the embedding is the penultimate feature; the
    weights file may then omit that layer. ``head="keep"`` embeds with the model's output.
    The cache key holds the model name, the weights file's SHA-256 (for a random
    initialisation, the seed and the SHA-256 of the initialised state), the head choice, the
    preprocessing, dtype and device, and ``encoder_id`` when given. torchvision and Pillow
    come with the ``images`` extra.
    """
    require("recallkit.runner.torchvision_encoder", "torchvision", "PIL", extra="images")
    import torchvision

    if head not in ("drop", "keep"):
        raise RunnerError(f"--head must be 'drop' or 'keep'. Got {head!r}.")
    if (weights is None) == (not random_init):
        raise RunnerError(
            f"The model {name} needs weights: a weights file (--weights FILE) or a random "
            "initialisation (--random-init), one of the two."
        )
    available = torchvision.models.list_models()
    if name not in available:
        close = difflib.get_close_matches(name, available, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise RunnerError(f"torchvision has no model named {name!r}.{hint}")
    if random_init:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_INIT_SEED)
            model = torchvision.models.get_model(name, weights=None)
    else:
        weights = Path(weights)  # type: ignore[arg-type]
        state, digest = _read_state_dict(weights)
        model = torchvision.models.get_model(name, weights=None)
    found = _find_head(model)
    if head == "drop" and found is None:
        raise RunnerError(
            f"Cannot find the classification layer of {name} to drop; use --head keep."
        )
    if not random_init:
        _load_weights(model, state, weights, name, found if head == "drop" else None)
    if head == "drop" and found is not None:
        parent, where, _ = found
        if isinstance(where, int):
            parent[where] = nn.Identity()
        else:
            setattr(parent, where, nn.Identity())
    preprocessing = preprocessing or Preprocessing()
    if random_init:
        identity = f"torchvision:{name}:head={head}:random-init:seed={RANDOM_INIT_SEED}"
        digest = state_digest(model)
        info: dict[str, Any] = {"weights": f"random initialisation, seed {RANDOM_INIT_SEED}"}
    else:
        identity = f"torchvision:{name}:head={head}"  # digest: of the bytes the weights came from
        info = {"weights": str(weights)}
    return module_encoder(
        model,
        preprocessing.transform(),
        identity=_with_id(identity, encoder_id),
        digest=digest,
        preprocessing=preprocessing.to_dict(),
        device=device,
        dtype=dtype,
        info=info,
    )


def _load_weights(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    weights: Path,
    name: str,
    dropped: tuple[nn.Module, str | int, str] | None,
) -> None:
    """Load ``state`` into ``model``; the dropped head's keys may be absent."""
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        first = str(error).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:3])
        raise RunnerError(f"The weights in '{weights}' do not fit {name}: {detail}") from None
    prefix = dropped[2] if dropped is not None else None
    missing = [k for k in missing if not (prefix and k.startswith(prefix))]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s), e.g. {', '.join(missing[:3])}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s), e.g. {', '.join(unexpected[:3])}")
        raise RunnerError(f"The weights in '{weights}' do not fit {name}: {'; '.join(parts)}.")


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


def import_callable(spec: str) -> Any:
    """Import ``package.module:attribute`` (the attribute may be dotted); the cwd is importable.

    >>> import_callable("os.path:join")("a", "b")
    'a/b'
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or ":" in attr:
        raise RunnerError(f"--callable must look like package.module:callable. Got {spec!r}.")
    with _cwd_on_path():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise RunnerError(f"Cannot import {module_name!r} (from {spec!r}): {error}.") from None
        except Exception as error:
            raise RunnerError(
                f"Importing {module_name!r} (from {spec!r}) raised {type(error).__name__}: {error}"
            ) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise RunnerError(f"Module {module_name!r} has no attribute {attr!r} (from {spec!r}).")
        target = getattr(target, part)
    return target


def _required_arguments(fn: Any) -> int | None:
    """How many arguments ``fn`` needs (positional, without a default); ``None`` if unknown."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    return sum(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in parameters
    )


def pixels(images: list[Any]) -> np.ndarray:
    """A weight-free encoder function for smoke tests: each image's pixels, downsampled.

    Each image is converted to RGB and resized to 16x16 (bilinear); its row is the 768 pixel
    values scaled to [0, 1], then a constant 1 (so that a black image has a non-zero row, as
    cosine similarity needs): ``(n, 769)`` float32. ``--callable
    recallkit.runner.encoders:pixels`` runs the whole path without a model or weights.

    >>> from PIL import Image
    >>> pixels([Image.new("RGB", (4, 4), (255, 0, 0))])[0, :4].tolist()
    [1.0, 0.0, 0.0, 1.0]
    """
    Image = pil_image()
    rows = [
        np.asarray(image.convert("RGB").resize((16, 16), Image.Resampling.BILINEAR))
        for image in images
    ]
    if not rows:
        return np.zeros((0, 16 * 16 * 3 + 1), dtype=np.float32)
    values = np.stack(rows).reshape(len(rows), -1).astype(np.float32) / 255.0
    return np.hstack([values, np.ones((len(rows), 1), dtype=np.float32)])


def callable_encoder(
    spec: str,
    *,
    preprocessing: Preprocessing | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    encoder_id: str | None = None,
) -> Encoder:
    """An encoder from ``package.module:callable``.

    The target is a torch module; an encoder function itself (a callable with one required
    argument, the batch of images; ``recallkit.runner.encoders:pixels`` is one, weight-free, for
    smoke tests); or a factory called with no arguments that returns one of: a torch module
    (fed with ``preprocessing``, ImageNet defaults); a pair ``(module, transform)`` whose
    transform maps one PIL image to a tensor (its own preprocessing); or an encoder function
    mapping a list of RGB PIL images to a ``(batch, dim)`` array (its own
    preprocessing, device and dtype). The cache key holds the spec and a digest of the module
    weights (and of the function's source file), and ``encoder_id`` when given: an encoder
    function that holds no torch module is otherwise keyed by its spec and source file alone,
    so one whose output depends on anything else (weights it loads, environment variables)
    needs an ``encoder_id`` that changes with it (``--encoder-id``).
    """
    _with_id("", encoder_id)  # check it before importing anything
    target = import_callable(spec)
    made: Any = target
    if not isinstance(target, nn.Module):
        if not callable(target):
            raise RunnerError(f"{spec!r} is a {type(target).__name__}, not a callable.")
        if _required_arguments(target) == 1:  # an encoder function: batch -> (n, d)
            made = target
        else:
            try:
                made = target()
            except Exception as error:
                raise RunnerError(
                    f"Calling {spec}() raised {type(error).__name__}: {error} (the callable must "
                    "be an encoder function of one argument, the batch of images, or take no "
                    "arguments and return a model or an encoder function)"
                ) from None
    identity = _with_id(f"callable:{spec}", encoder_id)
    info = {"callable": spec}
    if isinstance(made, nn.Module):
        preprocessing = preprocessing or Preprocessing()
        return module_encoder(
            made,
            preprocessing.transform(),
            identity=identity,
            digest=state_digest(made),
            preprocessing=preprocessing.to_dict(),
            device=device,
            dtype=dtype,
            info=info,
        )
    if (
        isinstance(made, tuple)
        and len(made) == 2
        and isinstance(made[0], nn.Module)
        and callable(made[1])
    ):
        model, transform = made
        return module_encoder(
            model,
            transform,
            identity=identity,
            digest=state_digest(model),
            preprocessing={"transform": repr(transform)},
            device=device,
            dtype=dtype,
            info=info,
        )
    if callable(made):
        digest, keyed_by = _function_key(made)
        if encoder_id is not None:
            keyed_by = "encoder_id"
        return Encoder(made, identity, digest, {"own": True}, "float32", "cpu", info, keyed_by)
    raise RunnerError(
        f"{spec}() returned a {type(made).__name__}; expected a torch module, a (module, "
        "transform) pair or an encoder function."
    )


def load_embeddings(path: str | os.PathLike[str], *, what: str = "embeddings") -> np.ndarray:
    """Read precomputed embeddings: ``.npy``, ``.pt``/``.pth`` or ``.safetensors``.

    A ``.pt``/``.safetensors`` file holds one tensor, or a dict with an ``"embeddings"`` entry
    (or a single entry). The result is a finite 2-D numeric array in native byte order, one
    row per image, in the file's own type: integers stay integers and are scored exactly, as
    the library scores them (a big-endian ``.npy`` is converted; extended precision is
    refused). The file is read by
    [`recallkit._inputs.io.read_array`][recallkit._inputs.io.read_array].

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "e.npy"
    >>> np.save(p, np.eye(3, dtype=np.float32))
    >>> load_embeddings(p).shape
    (3, 3)
    """
    from recallkit._inputs.io import read_array

    path = Path(path)
    try:
        array = read_array(
            path,
            what=what,
            default_key="embeddings",
            several_hint="name the embeddings 'embeddings'",
        )
    except ValueError as error:
        raise RunnerError(str(error)) from None
    if array.ndim != 2:
        raise RunnerError(
            f"The {what} file '{path}' must hold a 2-D numeric array (one row per image). "
            f"Got shape {array.shape}, dtype {array.dtype}."
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        row = int(np.nonzero(~np.isfinite(array).all(axis=1))[0][0])
        raise RunnerError(f"The {what} file '{path}' has a NaN or infinite value in row {row}.")
    return array
