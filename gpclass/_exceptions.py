"""The one exception type gpclass raises on purpose, and how a check's message is recovered from JAX's errors.

Every error gpclass raises about its inputs, a configuration or a failed solve
(with ``throw=True``) is a :class:`GPClassError`, a subclass of ``ValueError``,
whose message says what is wrong and comes first.  Checks of traced values run
inside the compiled program (``_errors.branched_error_if``) and stop it from a
host callback; JAX reports such an error as its own ``JaxRuntimeError`` (or,
through ``eqx.filter_jit``, equinox's ``EquinoxRuntimeError``) with the
message buried in a traceback.  gpclass's entry points called directly, and
programs compiled by :func:`gpclass.jit` and :func:`gpclass.filter_jit`,
recover the message (:func:`as_gpclass_error`) and raise it as a
``GPClassError``.  Inside a user's own ``jax.jit`` JAX's error reaches the
user as it is: its text contains the same message.
"""

import equinox as eqx
import jax


class GPClassError(ValueError):
    """An error gpclass raises on purpose: invalid inputs or settings, or (with ``throw=True``) a failed solve.

    A ``ValueError``, so ``except ValueError`` catches it too.  Raised in the
    same way by a direct call and inside :func:`gpclass.jit`; inside a plain
    ``jax.jit`` a failed run-time check arrives as ``jax.errors.JaxRuntimeError``
    whose text contains the same message.

    >>> try:
    ...     gpc.EP(damping=0.0)
    ... except gpc.GPClassError as error:
    ...     print(error)
    EP: damping must be a number in (0, 1] or None; got 0.0.
    >>> issubclass(gpc.GPClassError, ValueError)
    True
    """


_CHECK_MESSAGES: set[str] = set()  # every message a run-time check was built with (static strings)


def register_messages(messages) -> None:
    """Remember the messages of a run-time check, so that :func:`as_gpclass_error` can find them in JAX's error."""
    _CHECK_MESSAGES.update(messages)


def as_gpclass_error(error: BaseException) -> GPClassError | None:
    """The ``GPClassError`` of a failed gpclass check carried by JAX's (or equinox's) runtime error, else None."""
    if not isinstance(error, (jax.errors.JaxRuntimeError, eqx.EquinoxRuntimeError, ValueError)):
        return None
    if isinstance(error, GPClassError):
        return error
    text = str(error)
    found = [message for message in _CHECK_MESSAGES if message in text]
    return GPClassError(max(found, key=len)) if found else None
