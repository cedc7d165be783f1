"""Tensors as plain data: the numpy side of the worker protocol and of the report.

The parent process never imports torch (it would double the start-up cost of every run);
tensors cross the process boundary as {"dtype", "shape", "data"} with data flattened, and
non-finite floats travel as JSON's NaN / Infinity tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.float32,
          "int64": np.int64, "int32": np.int32, "bool": np.bool_}


def encode(a: Any) -> dict[str, Any]:
    arr = np.asarray(a)
    dtype = str(arr.dtype) if str(arr.dtype) in DTYPES else ("float32" if arr.dtype.kind == "f" else str(arr.dtype))
    return {"dtype": dtype, "shape": list(arr.shape), "data": arr.reshape(-1).tolist()}


def decode(d: dict[str, Any]) -> np.ndarray:
    return np.asarray(d["data"], dtype=DTYPES.get(d["dtype"], np.float64)).reshape(d["shape"])


def to_list(a: np.ndarray) -> Any:
    """Nested lists for humans (the report); floats stay floats, non-finite included."""
    return np.asarray(a).tolist()


def to_clean_list(a: np.ndarray) -> Any:
    """Nested lists with float32 values written as their shortest decimal (0.2, not
    0.20000000298023224): for inputs that a person typed."""
    arr = np.asarray(a)
    if arr.dtype == np.float32:
        return np.vectorize(lambda v: float(str(v)), otypes=[float])(arr).tolist() if arr.size else arr.tolist()
    return arr.tolist()
