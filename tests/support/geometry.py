"""The geometry tests' scene (a height field of triangles and downward rays) and its NumPy references (ray depths
by Möller-Trumbore against every triangle, point-to-mesh distances), shared with the child scripts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

N = 5  # vertices per side of the height field


def height_field(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Grid vertices on [0, 1]^2 (heights zero) and two counter-clockwise triangles per cell."""
    xs = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(xs, xs, indexing="ij")
    points = np.stack([x.ravel(), y.ravel(), np.zeros(n * n)], -1).astype(np.float32)
    faces = []
    for i in range(n - 1):
        for j in range(n - 1):
            v00, v10, v01, v11 = i * n + j, (i + 1) * n + j, i * n + j + 1, (i + 1) * n + j + 1
            faces += [[v00, v10, v11], [v00, v11, v01]]
    return points, np.asarray(faces, np.int32)


def heights(seed: int, n: int = N) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.3, 0.3, n * n).astype(np.float32)


def with_heights(points: np.ndarray, z: np.ndarray | jax.Array) -> np.ndarray | jax.Array:
    """``points`` with heights ``z``: a NumPy array for NumPy heights (references), else a JAX array."""
    if isinstance(z, np.ndarray):
        out = points.copy()
        out[:, 2] = z
        return out
    return jnp.asarray(points).at[:, 2].set(z)


def ray_origins(n: int = N) -> np.ndarray:
    """One downward ray per cell, inside one triangle, away from every edge (so that small moves keep the face)."""
    cells = np.array([[(i + 0.3) / (n - 1), (j + 0.6) / (n - 1)] for i in range(n - 1) for j in range(n - 1)])
    return np.concatenate([cells, np.full((len(cells), 1), 10.0)], -1).astype(np.float32)


def np_ray_depths(points: np.ndarray, faces: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """Möller-Trumbore against every triangle, nearest hit (or -1) per downward ray."""
    d = np.array([0.0, 0.0, -1.0])
    a, b, c = (points[faces[:, k]].astype(np.float64) for k in range(3))
    e1, e2 = b - a, c - a
    p = np.cross(d, e2)
    det = (e1 * p).sum(-1)
    s = origins[:, None, :] - a[None]
    u = (s * p).sum(-1) / det
    q = np.cross(s, e1)
    v = (q * d).sum(-1) / det
    t = (q * e2).sum(-1) / det
    hit = (np.abs(det) > 1e-12) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0)
    best = np.where(hit, t, np.inf).min(1)
    return np.where(np.isfinite(best), best, -1.0)


def segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ab = b - a
    s = np.clip(((p - a) * ab).sum(-1) / (ab * ab).sum(-1), 0.0, 1.0)
    return np.linalg.norm(p - (a + s[..., None] * ab), axis=-1)


def np_distances(points: np.ndarray, faces: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Distance from each point to the nearest triangle: the plane where the projection falls inside, else an edge."""
    a, b, c = (points[faces[:, k]].astype(np.float64)[None] for k in range(3))
    p = x.astype(np.float64)[:, None, :]
    n = np.cross(b - a, c - a)
    n = n / np.linalg.norm(n, axis=-1, keepdims=True)
    h = ((p - a) * n).sum(-1)
    proj = p - h[..., None] * n
    inside = np.ones(h.shape, bool)
    for u, v in ((a, b), (b, c), (c, a)):
        inside &= (np.cross(v - u, proj - u) * n).sum(-1) >= 0
    edges = np.minimum.reduce([segment_distance(p, a, b), segment_distance(p, b, c), segment_distance(p, c, a)])
    return np.where(inside, np.minimum(np.abs(h), edges), edges).min(1)


POINTS, FACES = height_field()
ORIGINS = ray_origins()
