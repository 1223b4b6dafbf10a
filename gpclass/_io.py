"""Save and load what gpclass returns: posteriors, fits, SVGP models (``gpc.save``, ``gpc.load``).

A file (format version 2) is three parts, one after the other::

    {"format": "gpclass", "format_version": 2, ...}\\n   one line of JSON: the header
    <skeleton_bytes bytes>                              the pickled skeleton
    <arrays[0]["nbytes"] bytes> <arrays[1]...> ...      each array in NumPy's .npy format

*The header* names the format and its version, the gpclass and JAX versions
that wrote the file, the type of the object, the length and SHA-256 digest of
the skeleton, and for every array, in order, its shape, dtype, kind (``jax``
or ``numpy``), length on disk and SHA-256 digest; its own digest
(``header_sha256``, over the header's other fields as compact JSON with
sorted keys) covers all of that.
*The skeleton* is the object with each array replaced by a placeholder that
holds its index (:class:`_Slot`), pickled: the pytree structure and every
static part (Python floats, ints and strings in fields, static fields such as
a method's ``max_steps``, class references) come back exactly as they were.
*The arrays* are written by ``np.save`` without pickles and read back by
``np.load``, after their digest and their shape and dtype were checked
against the header.  So deserialisation needs no object to be passed in: the
file rebuilds its own skeleton.

Why digests?  Without them a flipped byte in an array loads without error and
changes the predictions (of 60 single-byte flips in a version-1 file, 22 loaded
silently, one giving NaN).  :func:`load` checks each part's digest before it
unpickles or uses that part, and names the part that does not match.

Why not one pickle of the whole object?  ``pickle.dumps(posterior)`` works
(tested) and is the right tool within one program version; the file format
adds a version, digests and a description that can be checked before
anything is unpickled (a wrong file, a newer format, float64 data in a
process without x64), and keeps the arrays in NumPy's portable format.

:func:`save` writes to a temporary file in the target's directory, flushes it
to disk and renames it over the target: a failed write (a full disk) leaves
the previous file as it was and raises the operating system's error.

Files of format version 1 (written by earlier versions of gpclass: no digests, the arrays written
by ``eqx.tree_serialise_leaves``) still load, unverified, with a
``UserWarning`` that says so; save them again to add digests.

Errors (all :class:`gpclass.GPClassError`, a ``ValueError``, saying what is
wrong): a file that does not start with a gpclass header; a
``format_version`` newer than this library reads; a digest that does not
match (the part is named); a skeleton that cannot be rebuilt (a class this
gpclass does not have); placeholders that do not match the header's arrays;
arrays whose shape or dtype on disk differ from the header's; a truncated
file; trailing data.  :func:`save` refuses arrays of strings or Python
objects (no ``.npy`` without pickles holds them) and PRNG key arrays.

dtypes are preserved: a float32 model loads as float32, a float64 one as
float64.  JAX arrays of 64-bit dtypes (float64, int64, complex128) need
64-bit mode (the ``jax_enable_x64`` option, or loading inside
``with jax.enable_x64(True):``; the process's choice, never gpclass's): without it JAX would silently
downcast them to 32 bits, so :func:`load` raises instead.
NumPy arrays in the object stay NumPy arrays.  Weak typing of JAX scalars is
not recorded (a loaded scalar is strongly typed).

The skeleton is a pickle: as with ``pickle`` and ``torch.load``, load only
files you trust (the digests detect damage, not tampering).  Class references
are by import path, so a file loads into a gpclass whose classes have the same
names and fields; the header records the gpclass version that wrote it.
"""

import hashlib
import io
import json
import os
import pickle
import tempfile
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._exceptions import GPClassError

FORMAT = "gpclass"
FORMAT_VERSION = 2
_MAX_HEADER = 1 << 24  # bytes read looking for the header's newline
_WIDE = ("float64", "int64", "uint64", "complex128")  # what JAX downcasts without x64


class _Slot:
    """The placeholder of array ``index`` in a pickled skeleton."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __getstate__(self):
        return self.index

    def __setstate__(self, index):
        self.index = index

    def __repr__(self):
        return f"_Slot({self.index})"


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _header_digest(header: dict) -> str:
    """The SHA-256 of the header without its own digest, as compact JSON with sorted keys."""
    fields = {key: value for key, value in header.items() if key != "header_sha256"}
    return _digest(json.dumps(fields, separators=(",", ":"), sort_keys=True).encode())


def save(path, obj: Any) -> None:
    """Write ``obj`` (a posterior, a ``FitResult``, an ``SVGP``, ...) to ``path`` (a path or a binary file).

    Any pytree of JAX / NumPy arrays of numbers whose other parts pickle can
    be saved; :func:`load` rebuilds it in another process.  A path is written
    through a temporary file in the same directory, flushed to disk and
    renamed over the target, so a failed write (a full disk) leaves an
    existing file as it was.  See the module docstring for the format.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     gpc.save(os.path.join(folder, "posterior.gpc"), post)
        ...     restored = gpc.load(os.path.join(folder, "posterior.gpc"))
        >>> type(restored).__name__, bool(jnp.array_equal(restored.mean, post.mean))
        ('GaussianPosterior', True)
    """
    parts = _encode(obj)
    if not isinstance(path, (str, os.PathLike)):
        if not hasattr(path, "write"):
            raise TypeError(f"expected a path or a binary file object; got {type(path).__name__}.")
        _write_all(path, parts)
        return
    _replace_atomically(os.fspath(path), parts)


def _encode(obj) -> tuple[bytes, bytes, list]:
    """The file's parts: the header line, the skeleton, the arrays (as NumPy arrays, written by ``np.save``).

    The arrays' digests are taken by a first ``np.save`` into a hashing sink,
    so no second copy of a large array is held in memory.
    """
    from . import __version__

    leaves: list = []

    def slot(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            raise GPClassError("save: the object holds a PRNG key array; save jax.random.key_data(key) instead.")
        if np.dtype(x.dtype).kind in "OSUV":
            raise GPClassError(f"save: the object holds an array of dtype {np.dtype(x.dtype)} (strings or Python "
                               "objects), which the file format cannot hold; convert it to numbers, or keep it apart "
                               "from the saved object.")
        leaves.append(x)
        return _Slot(len(leaves) - 1)

    skeleton = jax.tree.map(lambda x: slot(x) if _is_array(x) else x, obj)
    try:
        skeleton_bytes = pickle.dumps(skeleton, protocol=4)
    except Exception as e:  # a lambda or an open file in a static field
        raise GPClassError(f"save: a non-array part of the object cannot be pickled: {e}") from e
    arrays = [np.asarray(x) for x in leaves]
    sinks = [_HashingSink.of(x) for x in arrays]
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "gpclass_version": __version__,
        "jax_version": jax.__version__,
        "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "skeleton_bytes": len(skeleton_bytes),
        "skeleton_sha256": _digest(skeleton_bytes),
        "arrays": [
            {"shape": list(x.shape), "dtype": np.dtype(x.dtype).name,
             "kind": "numpy" if isinstance(leaf, np.ndarray) else "jax", "nbytes": sink.nbytes,
             "sha256": sink.sha256.hexdigest()}
            for x, leaf, sink in zip(arrays, leaves, sinks)
        ],
    }
    header["header_sha256"] = _header_digest(header)
    return json.dumps(header, separators=(",", ":")).encode() + b"\n", skeleton_bytes, arrays


class _HashingSink:
    """A write-only file that keeps the SHA-256 and length of what ``np.save`` writes to it."""

    def __init__(self):
        self.sha256, self.nbytes = hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.nbytes += len(data)
        return len(data)

    @classmethod
    def of(cls, x: np.ndarray) -> "_HashingSink":
        sink = cls()
        np.save(sink, x, allow_pickle=False)
        return sink


def _replace_atomically(path: str, parts) -> None:
    """Write the file's ``parts`` to a temporary file beside ``path``, flush it to disk, and rename it to ``path``.

    The rename is atomic on POSIX and Windows file systems: readers see the
    old file or the new one, never a mixture, and a failure before it (a full
    disk, an interrupt) removes the temporary file and leaves ``path`` as it
    was.  A new file gets the permissions ``open`` would give it; a replaced
    one keeps its own.
    """
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask()
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, parts)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _sync_directory(directory)


def _write_all(f, parts) -> None:
    """Write the header line, the skeleton and each array (``np.save``) to the open binary file ``f``."""
    header, skeleton_bytes, arrays = parts
    f.write(header)
    f.write(skeleton_bytes)
    for x in arrays:
        np.save(f, x, allow_pickle=False)


def _umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status), else the common 0o022."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _sync_directory(directory: str) -> None:
    """Flush the directory entry of the rename to disk where the platform allows (POSIX), else nothing."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unbuilt(error, header) -> GPClassError:
    return GPClassError(f"load: the object's structure could not be rebuilt ({type(error).__name__}: {error}); the "
                        f"file is corrupted or was written by a gpclass ({header.get('gpclass_version')}) whose "
                        "classes differ from this one's.")


def load(path) -> Any:
    """The object :func:`save` wrote to ``path`` (a path or a binary file), its arrays on the default device.

    Every digest is checked before the part it covers is unpickled or used.  Raises
    :class:`gpclass.GPClassError` for a file that is not a gpclass file, a
    newer format version, a damaged part (the digest that does not match is
    named), a header, skeleton and arrays that do not fit together, and
    64-bit JAX arrays in a process without x64 (see the module docstring).
    A file of format version 1 loads unverified, with a ``UserWarning``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> import io
        >>> file = io.BytesIO()  # or a path: gpc.save("posterior.gpc", post), gpc.load("posterior.gpc")
        >>> gpc.save(file, post)
        >>> restored = gpc.load(io.BytesIO(file.getvalue()))
        >>> type(restored).__name__, restored.X.shape, bool(restored.log_marginal == post.log_marginal)
        ('GaussianPosterior', (40, 4), True)
    """
    with _open(path, "rb") as f:
        header = _read_header(f)
        specs = _array_specs(header)
        skeleton_bytes = f.read(header["skeleton_bytes"])
        if len(skeleton_bytes) != header["skeleton_bytes"]:
            raise GPClassError(f"load: the file is truncated (the skeleton has {len(skeleton_bytes)} of "
                               f"{header['skeleton_bytes']} bytes).")
        if header["format_version"] >= 2 and _digest(skeleton_bytes) != header["skeleton_sha256"]:
            raise GPClassError("load: the skeleton's SHA-256 digest does not match the header's; the file is damaged.")
        try:
            skeleton = pickle.loads(skeleton_bytes)
        except (AttributeError, ImportError) as e:
            if header["format_version"] < 2:
                raise _unbuilt(e, header) from e
            raise GPClassError(f"load: the file is intact (its digest matches) but holds an object of a class this "
                               f"process cannot import ({type(e).__name__}: {e}): a class of your own (a kernel or "
                               "likelihood defined in a script run as __main__ or in a notebook) must be importable "
                               "where the file is loaded; define it in a module and import that module before "
                               "gpc.load.") from e
        except Exception as e:
            raise _unbuilt(e, header) from e
        slots = [leaf.index for leaf in jax.tree.leaves(skeleton, is_leaf=_is_slot) if _is_slot(leaf)]
        if sorted(slots) != list(range(len(specs))):
            raise GPClassError(f"load: structure mismatch: the skeleton has {len(slots)} array slots, the header "
                               f"describes {len(specs)} arrays; the file is corrupted.")
        if header["format_version"] >= 2:
            chunks = _read_chunks(f, header["arrays"])
            arrays = [_array_from_npy(i, chunk, spec) for i, (chunk, spec) in enumerate(zip(chunks, specs))]
        else:
            arrays = _read_version_1_arrays(f, specs)
        if f.read(1):
            raise GPClassError("load: unexpected data after the last array; the file is corrupted.")
    return jax.tree.map(lambda x: arrays[x.index] if _is_slot(x) else x, skeleton, is_leaf=_is_slot)


def _read_chunks(f, descriptions) -> list[bytes]:
    """Each array's bytes, read and checked against its length and digest."""
    chunks = []
    for i, a in enumerate(descriptions):
        chunk = f.read(a["nbytes"])
        if len(chunk) != a["nbytes"]:
            raise GPClassError(f"load: the file is truncated (array {i} has {len(chunk)} of {a['nbytes']} bytes).")
        if _digest(chunk) != a["sha256"]:
            raise GPClassError(f"load: array {i}'s SHA-256 digest does not match the header's; the file is damaged.")
        chunks.append(chunk)
    return chunks


def _array_from_npy(index: int, chunk: bytes, spec):
    shape, dtype, kind = spec
    try:
        x = np.load(io.BytesIO(chunk), allow_pickle=False)
    except Exception as e:
        raise GPClassError(f"load: array {index} is not a valid .npy array ({e}).") from e
    if x.shape != shape or x.dtype != dtype:
        raise GPClassError(f"load: the arrays on disk do not match the header: array {index} has shape {x.shape} "
                           f"and dtype {x.dtype}, the header says {shape} and {dtype}.")
    return jnp.asarray(x) if kind == "jax" else x


def _read_version_1_arrays(f, specs) -> list:
    """The arrays of a format-1 file (``eqx.tree_serialise_leaves``), unverified: that format has no digests."""
    warnings.warn("load: the file has format version 1, which has no checksums: loaded unverified (a damaged "
                  "array would not be detected). Save it again with gpc.save to add them.", UserWarning, stacklevel=3)
    like = [jax.ShapeDtypeStruct(shape, dtype) if kind == "jax" else np.empty(shape, dtype)
            for shape, dtype, kind in specs]
    try:
        return eqx.tree_deserialise_leaves(f, like)
    except Exception as e:
        raise GPClassError(f"load: the arrays on disk do not match the header (shape, dtype or length): "
                           f"{e}{': ' + str(e.__cause__) if e.__cause__ else ''}") from e


def _is_slot(x) -> bool:
    return isinstance(x, _Slot)


def _read_header(f) -> dict:
    line = f.readline(_MAX_HEADER)
    try:
        header = json.loads(line.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise GPClassError("load: not a gpclass file (it does not start with a gpclass header line); "
                           "gpc.load reads files written by gpc.save.")
    version = header.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise GPClassError(f"load: the header's format_version is {version!r}, not a version number; the file is "
                           "corrupted.")
    if version > FORMAT_VERSION:
        raise GPClassError(f"load: the file has format version {version}, written by gpclass "
                           f"{header.get('gpclass_version')}; this gpclass reads versions up to {FORMAT_VERSION}. "
                           "Upgrade gpclass to load it.")
    if version >= 2 and header.get("header_sha256") != _header_digest(header):
        raise GPClassError("load: the header's SHA-256 digest does not match its contents; the file is damaged.")
    if not isinstance(header.get("skeleton_bytes"), int) or not isinstance(header.get("arrays"), list):
        raise GPClassError("load: the header lacks 'skeleton_bytes' or 'arrays'; the file is corrupted.")
    return header


def _array_specs(header) -> list:
    specs = []
    wide = []
    for i, a in enumerate(header["arrays"]):
        try:
            shape, dtype, kind = tuple(int(s) for s in a["shape"]), jnp.dtype(a["dtype"]), a["kind"]
            if header["format_version"] >= 2 and not (isinstance(a["nbytes"], int) and isinstance(a["sha256"], str)):
                raise TypeError("nbytes or sha256")
        except (KeyError, TypeError, ValueError) as e:
            raise GPClassError(f"load: the header's description of array {i} is malformed ({a!r}).") from e
        if kind not in ("jax", "numpy") or any(s < 0 for s in shape):
            raise GPClassError(f"load: the header's description of array {i} is malformed ({a!r}).")
        if kind == "jax" and dtype.name in _WIDE:
            wide.append(dtype.name)
        specs.append((shape, dtype, kind))
    if wide and not jax.config.jax_enable_x64:
        raise GPClassError(f"load: the file holds 64-bit JAX arrays ({', '.join(sorted(set(wide)))}) and this "
                           "process runs JAX without 64-bit mode, which would downcast them to 32 bits; enable "
                           "the jax_enable_x64 option, or load inside `with jax.enable_x64(True):`.")
    return specs


class _open:
    """``open(path, mode)``, or a binary file object passed in (left open)."""

    def __init__(self, path, mode):
        self.path, self.mode, self.own = path, mode, isinstance(path, (str, os.PathLike))

    def __enter__(self):
        if not self.own and not hasattr(self.path, "read" if "r" in self.mode else "write"):
            raise TypeError(f"expected a path or a binary file object; got {type(self.path).__name__}.")
        self.f = open(self.path, self.mode) if self.own else self.path
        return self.f

    def __exit__(self, *exc):
        if self.own:
            self.f.close()
