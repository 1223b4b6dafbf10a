"""Save and load what gpclass returns: posteriors, fits, SVGP models (``gpc.save``, ``gpc.load``).

A file is three parts, one after the other::

    {"format": "gpclass", "format_version": 1, ...}\\n   one line of JSON: the header
    <skeleton_bytes bytes>                              the pickled skeleton
    <the arrays>                                        eqx.tree_serialise_leaves of the array list

*The header* names the format and its version, the gpclass and JAX versions
that wrote the file, the type of the object, the length of the skeleton, and
the shape, dtype and kind (``jax`` or ``numpy``) of every array, in order.
*The skeleton* is the object with each array replaced by a placeholder that
holds its index (:class:`_Slot`), pickled: the pytree structure and every
static part (Python floats, ints and strings in fields, static fields such as
a method's ``max_steps``, class references) come back exactly as they were.
*The arrays* are written by equinox's ``tree_serialise_leaves`` (NumPy's
``.npy`` format, one after another) and read back by
``tree_deserialise_leaves`` into the "like" list the header describes
(``jax.ShapeDtypeStruct`` or an empty NumPy array), which also checks each
array's shape and dtype against the header.  So deserialisation needs no
object to be passed in: the file rebuilds its own skeleton.

Why not one pickle of the whole object?  ``pickle.dumps(posterior)`` works
(tested) and is the right tool within one program version; the file format
adds a version and a description that can be checked before anything is
unpickled (a wrong file, a newer format, float64 data in a process without
x64), and keeps the arrays in NumPy's portable format.

Errors (all ``ValueError``, saying what is wrong): a file that does not start
with a gpclass header; a ``format_version`` newer than this library reads; a
skeleton that cannot be rebuilt (truncated or corrupted, or a class this
gpclass does not have); placeholders that do not match the header's arrays;
arrays whose shape or dtype on disk differ from the header's; trailing data.

dtypes are preserved: a float32 model loads as float32, a float64 one as
float64.  JAX arrays of 64-bit dtypes (float64, int64, complex128) need
64-bit mode (the ``jax_enable_x64`` option, or loading inside
``with jax.enable_x64(True):``; the process's choice, never gpclass's): without it JAX would silently
downcast them to 32 bits, so :func:`load` raises a ``ValueError`` instead.
NumPy arrays in the object stay NumPy arrays.  Weak typing of JAX scalars is
not recorded (a loaded scalar is strongly typed).

The skeleton is a pickle: as with ``pickle`` and ``torch.load``, load only
files you trust.  Class references are by import path, so a file loads into a
gpclass whose classes have the same names and fields; the header records the
gpclass version that wrote it.
"""

import json
import os
import pickle
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

FORMAT = "gpclass"
FORMAT_VERSION = 1
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


def save(path, obj: Any) -> None:
    """Write ``obj`` (a posterior, a ``FitResult``, an ``SVGP``, ...) to ``path`` (a path or a binary file).

    Any pytree of JAX / NumPy arrays whose other parts pickle can be saved;
    :func:`load` rebuilds it in another process.  See the module docstring for
    the format.
    """
    from . import __version__

    arrays: list = []

    def slot(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            raise ValueError("save: the object holds a PRNG key array; save jax.random.key_data(key) instead.")
        arrays.append(x)
        return _Slot(len(arrays) - 1)

    skeleton = jax.tree.map(lambda x: slot(x) if _is_array(x) else x, obj)
    try:
        skeleton_bytes = pickle.dumps(skeleton, protocol=4)
    except Exception as e:  # a lambda or an open file in a static field
        raise ValueError(f"save: a non-array part of the object cannot be pickled: {e}") from e
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "gpclass_version": __version__,
        "jax_version": jax.__version__,
        "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "skeleton_bytes": len(skeleton_bytes),
        "arrays": [
            {"shape": list(x.shape), "dtype": np.dtype(x.dtype).name, "kind": "jax" if isinstance(x, jax.Array) else "numpy"}
            for x in arrays
        ],
    }
    with _open(path, "wb") as f:
        f.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        f.write(skeleton_bytes)
        eqx.tree_serialise_leaves(f, arrays)


def load(path) -> Any:
    """The object :func:`save` wrote to ``path`` (a path or a binary file), its arrays on the default device.

    Raises ``ValueError`` for a file that is not a gpclass file, a newer
    format version, a header, skeleton and arrays that do not fit together,
    and 64-bit JAX arrays in a process without x64 (see the module docstring).
    """
    with _open(path, "rb") as f:
        header = _read_header(f)
        specs = _array_specs(header)
        skeleton_bytes = f.read(header["skeleton_bytes"])
        if len(skeleton_bytes) != header["skeleton_bytes"]:
            raise ValueError(f"load: the file is truncated (the skeleton has {len(skeleton_bytes)} of "
                             f"{header['skeleton_bytes']} bytes).")
        try:
            skeleton = pickle.loads(skeleton_bytes)
        except Exception as e:
            raise ValueError(f"load: the object's structure could not be rebuilt ({type(e).__name__}: {e}); the file "
                             f"is corrupted or was written by a gpclass ({header.get('gpclass_version')}) whose classes "
                             "differ from this one's.") from e
        slots = [leaf.index for leaf in jax.tree.leaves(skeleton, is_leaf=_is_slot) if _is_slot(leaf)]
        if sorted(slots) != list(range(len(specs))):
            raise ValueError(f"load: structure mismatch: the skeleton has {len(slots)} array slots, the header "
                             f"describes {len(specs)} arrays; the file is corrupted.")
        like = [jax.ShapeDtypeStruct(shape, dtype) if kind == "jax" else np.empty(shape, dtype)
                for shape, dtype, kind in specs]
        try:
            arrays = eqx.tree_deserialise_leaves(f, like)
        except Exception as e:
            raise ValueError(f"load: the arrays on disk do not match the header (shape, dtype or length): "
                             f"{e}{': ' + str(e.__cause__) if e.__cause__ else ''}") from e
        if f.read(1):
            raise ValueError("load: unexpected data after the last array; the file is corrupted.")
    return jax.tree.map(lambda x: arrays[x.index] if _is_slot(x) else x, skeleton, is_leaf=_is_slot)


def _is_slot(x) -> bool:
    return isinstance(x, _Slot)


def _read_header(f) -> dict:
    line = f.readline(_MAX_HEADER)
    try:
        header = json.loads(line.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError("load: not a gpclass file (it does not start with a gpclass header line); "
                         "gpc.load reads files written by gpc.save.")
    version = header.get("format_version")
    if not isinstance(version, int):
        raise ValueError(f"load: the header's format_version is {version!r}, not an integer; the file is corrupted.")
    if version > FORMAT_VERSION:
        raise ValueError(f"load: the file has format version {version}, written by gpclass "
                         f"{header.get('gpclass_version')}; this gpclass reads versions up to {FORMAT_VERSION}. "
                         "Upgrade gpclass to load it.")
    if not isinstance(header.get("skeleton_bytes"), int) or not isinstance(header.get("arrays"), list):
        raise ValueError("load: the header lacks 'skeleton_bytes' or 'arrays'; the file is corrupted.")
    return header


def _array_specs(header) -> list:
    specs = []
    wide = []
    for i, a in enumerate(header["arrays"]):
        try:
            shape, dtype, kind = tuple(int(s) for s in a["shape"]), jnp.dtype(a["dtype"]), a["kind"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"load: the header's description of array {i} is malformed ({a!r}).") from e
        if kind not in ("jax", "numpy") or any(s < 0 for s in shape):
            raise ValueError(f"load: the header's description of array {i} is malformed ({a!r}).")
        if kind == "jax" and dtype.name in _WIDE:
            wide.append(dtype.name)
        specs.append((shape, dtype, kind))
    if wide and not jax.config.jax_enable_x64:
        raise ValueError(f"load: the file holds 64-bit JAX arrays ({', '.join(sorted(set(wide)))}) and this process "
                         "runs JAX without 64-bit mode, which would downcast them to 32 bits; enable "
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
