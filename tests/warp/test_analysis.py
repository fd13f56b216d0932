"""Kernel source analysis: the zero-fill elision proves overwrites conservatively; writes to struct fields are found."""

import textwrap

import pytest

from jarp.warp._plan import _analysis
from jarp.warp._plan._analysis import overwritten_outputs


def _src(body: str) -> str:
    return textwrap.dedent(body)


@pytest.mark.parametrize(
    ("source", "outputs", "expected"),
    [
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = 2.0 * x[i]\n", ("y",), {"y": 1}),
        ("def k(x, y):\n    i, j = wp.tid()\n    y[i, j] = x[i, j]\n", ("y",), {"y": 2}),
        ("def k(x, y):\n    i = wp.tid()\n    n = y.shape[0]\n    y[i] = float(n)\n", ("y",), {"y": 1}),
        # accumulation reads the old value
        ("def k(x, y):\n    i = wp.tid()\n    y[i] += x[i]\n", ("y",), {}),
        ("def k(x, y):\n    i = wp.tid()\n    wp.atomic_add(y, 0, x[i])\n", ("y",), {}),
        # early exit may skip the write
        ("def k(x, y):\n    i = wp.tid()\n    if i > 2:\n        return\n    y[i] = x[i]\n", ("y",), {}),
        # conditional write only
        ("def k(x, y):\n    i = wp.tid()\n    if x[i] > 0.0:\n        y[i] = x[i]\n", ("y",), {}),
        # write through another index
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = x[i]\n    y[0] = 1.0\n", ("y",), {}),
        ("def k(x, idx, y):\n    i = wp.tid()\n    y[idx[i]] = x[i]\n", ("y",), {}),
        # the thread index is reassigned
        ("def k(x, y):\n    i = wp.tid()\n    i = 0\n    y[i] = x[i]\n", ("y",), {}),
        # output read before written
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = y[i] + x[i]\n", ("y",), {}),
        ("def k(x, y):\n    y[0] = x[0]\n", ("y",), {}),
        ("not python (", ("y",), {}),
    ],
)
def test_overwritten_outputs(source, outputs, expected):
    assert overwritten_outputs(_src(source), outputs) == expected


@pytest.mark.parametrize(
    ("body", "written"),
    [
        ("s.a[i] = 1.0", ("s.a",)),
        ("s.inner.b[i] += 1.0", ("s.inner.b",)),
        ("wp.atomic_add(s.a, i, 1.0)", ("s.a",)),
        ("out[i] = s.a[i] * s.k", ()),
        ("t = s.a[i]\n    out[i] = t", ()),
    ],
)
def test_written_struct_fields(body, written):
    source = f"def k(s: S, out: wp.array(dtype=float)):\n    i = wp.tid()\n    {body}\n"
    assert _analysis.written_struct_fields(source, ("s",)) == written
