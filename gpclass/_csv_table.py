"""The CSV job's data: a CSV file read into a :class:`Table` (numeric features, the target's values as written),
and the target's values coded as classes (binary signs, class indices, or ordered ranks for ``--ordinal``).

Every problem with the file is a :class:`DataError` naming the column and line.
"""

import csv
from typing import NamedTuple

import numpy as np

# Values read as "missing" (compared after stripping blanks, case-insensitively); "?" is UCI's marker.
MISSING = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
class DataError(ValueError):
    """A problem with the user's data file, reported to the user as one message (no traceback)."""


class Table(NamedTuple):
    """The cases of a CSV file: numeric features and the target's values as they were written."""

    X: np.ndarray  # (n, d) float64
    labels: list  # n strings (stripped)
    features: list  # d column names
    target: str
    columns: list  # every column of the header
    num_rows: int  # data rows read (blank lines not counted)
    num_dropped: int  # rows left out for a missing value (--drop-missing)


def split_names(text):
    """The comma-separated names of an option (``--features``, ``--order``), stripped; None for None."""
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def read_csv(path, target, features=None, drop_missing=False, delimiter=",") -> Table:
    """Read a CSV file: the header, the numeric feature columns and the target's values as strings.

    Raises :class:`DataError` for an empty file or a missing header, a target or feature not among the
    columns, rows of the wrong length, missing values (unless ``drop_missing``), non-numeric or infinite
    feature values: each message names the column and the first offending line.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # utf-8-sig: spreadsheets write a BOM
            reader = csv.reader(f, delimiter=delimiter)
            header = next((row for row in reader if any(field.strip() for field in row)), None)
            if header is None:
                raise DataError(f"{path} is empty: the first row must be a header naming the columns")
            rows = [(reader.line_num, row) for row in reader if any(field.strip() for field in row)]
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror or error}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataError(f"cannot read {path} as UTF-8 CSV: {error}; save it as UTF-8 text") from None
    columns = [name.strip() for name in header]
    _check_header(path, columns)
    features = _feature_columns(path, columns, target, features)
    if not features:
        raise DataError(f"no feature columns: {path} has only the target column {target!r}; the features are the "
                        "other columns")
    if not rows:
        raise DataError(f"{path} has a header but no data rows")
    for line, row in rows:
        if len(row) != len(columns):
            raise DataError(f"line {line} of {path} has {len(row)} fields, the header has {len(columns)}: check the "
                            f"delimiter (--delimiter, now {delimiter!r}) and the quoting of fields that contain it")

    used = [columns.index(name) for name in [*features, target]]
    missing = [(line, columns[j]) for line, row in rows for j in used if row[j].strip().lower() in MISSING]
    if missing and not drop_missing:
        num = len({line for line, _ in missing})
        raise DataError(f"column {missing[0][1]!r} has a missing value on line {missing[0][0]} "
                        f"({num} row{'s' * (num > 1)} in all have one); --drop-missing leaves such rows out")
    drop = {line for line, _ in missing}
    kept = [(line, row) for line, row in rows if line not in drop]
    if not kept:
        raise DataError(f"every row of {path} has a missing value in a used column: choose columns with --features, "
                        "or fill in the values")
    X = np.empty((len(kept), len(features)))
    for k, name in enumerate(features):
        j = columns.index(name)
        X[:, k] = _numeric_column(path, name, [(line, row[j].strip()) for line, row in kept])
    labels = [row[columns.index(target)].strip() for _, row in kept]
    return Table(X, labels, list(features), target, columns, len(rows), len(drop))


def _feature_columns(path, columns, target, features) -> list[str]:
    """The feature columns: every column but the target by default, else ``features``, checked against the header."""
    if target not in columns:
        raise DataError(f"no column {target!r} in {path}; its columns are: {', '.join(columns)} (--target names the "
                        "column of class labels)")
    if features is None:
        return [name for name in columns if name != target]
    unknown = [name for name in features if name not in columns]
    if unknown:
        raise DataError(f"no column {unknown[0]!r} in {path}; its columns are: {', '.join(columns)} (--features "
                        "lists feature columns)")
    if target in features:
        raise DataError(f"the target {target!r} cannot also be a feature: leave it out of --features")
    if len(set(features)) != len(features):
        raise DataError(f"--features names {next(f for f in features if features.count(f) > 1)!r} twice: list each "
                        "column once")
    return list(features)


def _check_header(path, columns) -> None:
    if any(not name for name in columns):
        raise DataError(f"column {columns.index('') + 1} of the header of {path} has no name: name every column in "
                        "the header row")
    duplicates = sorted({name for name in columns if columns.count(name) > 1})
    if duplicates:
        raise DataError(f"the header of {path} names {duplicates[0]!r} twice: give each column its own name")
    if all(_is_number(name) for name in columns):
        raise DataError(f"the first row of {path} is all numbers ({', '.join(columns[:4])}"
                        f"{', ...' if len(columns) > 4 else ''}): a header row naming the columns is required")


def _is_number(text) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numeric_column(path, name, values) -> np.ndarray:
    """The column as floats; a DataError names the first value that is not a finite number."""
    bad = [(line, text) for line, text in values if not _is_number(text)]
    if bad:
        raise DataError(f"column {name!r} is not numeric: {bad[0][1]!r} on line {bad[0][0]} of {path} "
                        f"({len(bad)} such value{'s' * (len(bad) > 1)}); features must be numbers "
                        "(choose columns with --features)")
    out = np.array([float(text) for _, text in values])
    if not np.all(np.isfinite(out)):
        line, text = values[int(np.argmin(np.isfinite(out)))]
        raise DataError(f"column {name!r} has the non-finite value {text!r} on line {line} of {path}: fix that value "
                        "or remove the row")
    return out


def class_codes(table, binary_signs=True):
    """The classes (sorted: numerically if every label is a number, else as text) and each case's code.

    Two classes are coded -1, +1 (the second sorted class is +1; ``binary_signs=False``: 0, 1); more are coded
    0..C-1.
    """
    labels = table.labels
    if all(_is_number(label) for label in labels):
        first = {}  # a number's first spelling names its class: "1" and "1.0" are one class
        for label in labels:
            first.setdefault(float(label), label)
        keys = sorted(first)
        names = [first[k] for k in keys]
        index = {k: i for i, k in enumerate(keys)}
        codes = np.array([index[float(label)] for label in labels])
    else:
        names = sorted(set(labels))
        index = {name: i for i, name in enumerate(names)}
        codes = np.array([index[label] for label in labels])
    if len(names) < 2:
        raise DataError(f"the target column {table.target!r} has one class only ({names[0]!r}, {len(labels)} "
                        "rows): classification needs at least two")
    singletons = int(np.sum(np.bincount(codes) == 1))
    if len(names) > 2 and singletons > len(names) / 2:
        raise DataError(f"the target column {table.target!r} has {len(names)} distinct values in {len(labels)} "
                        f"rows, {singletons} of them once only: is it a class label? (a continuous target is "
                        "regression, not classification)")
    if len(names) == 2 and binary_signs:
        return names, np.where(codes == 1, 1.0, -1.0)
    return names, codes.astype(np.int64)


def ordinal_codes(table, order=None):
    """Ordered classes (lowest first) and each case's rank 0..K-1, for ``--ordinal``.

    Numbers are ordered numerically (as :func:`class_codes`: "1" and "1.0" are one class); other values need
    ``order``, the comma-separated values from the lowest to the highest, matched to the stripped text of the
    column (with ``order`` numbers are matched as text too).
    """
    labels = table.labels
    if order is None:
        if not all(_is_number(label) for label in labels):
            text = sorted({label for label in labels if not _is_number(label)})
            raise DataError(f"--ordinal: the target column {table.target!r} holds values that are not numbers "
                            f"({', '.join(repr(t) for t in text[:3])}{', ...' if len(text) > 3 else ''}), whose "
                            "order cannot be guessed; give it with --order LOW,...,HIGH (every value, lowest first)")
        return class_codes(table, binary_signs=False)
    names = split_names(order)
    if len(set(names)) != len(names):
        raise DataError(f"--order names {next(n for n in names if names.count(n) > 1)!r} twice: list each value once")
    rank = {name: k for k, name in enumerate(names)}
    unknown = sorted({label for label in labels if label not in rank})
    if unknown:
        raise DataError(f"the target column {table.target!r} holds {unknown[0]!r}, which --order does not list "
                        f"(--order lists {', '.join(repr(n) for n in names)})")
    absent = [name for name in names if name not in set(labels)]
    if absent:
        raise DataError(f"--order lists {absent[0]!r}, which no row of the target column {table.target!r} holds: "
                        "list the values that occur")
    if len(names) < 2:
        raise DataError(f"the target column {table.target!r} has one class only ({names[0]!r}, {len(labels)} "
                        "rows): classification needs at least two")
    return names, np.array([rank[label] for label in labels], np.int64)
