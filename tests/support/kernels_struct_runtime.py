"""Kernels reading struct value fields (material constants) that tests give JAX values: traced, batched, differentiated."""

import warp as wp


@wp.struct
class Material:
    k: wp.float32
    rest: wp.float32
    g: wp.vec3f


@wp.struct
class Body:
    material: Material
    count: wp.int32


@wp.kernel
def spring_energy(x: wp.array(dtype=wp.float32), mat: Material, energy: wp.array(dtype=wp.float32)):
    i = wp.tid()
    d = x[i] - mat.rest
    wp.atomic_add(energy, 0, 0.5 * mat.k * d * d)


@wp.kernel
def gravity(x: wp.array(dtype=wp.vec3f), mat: Material, out: wp.array(dtype=wp.vec3f)):
    i = wp.tid()
    out[i] = x[i] + mat.k * mat.g


@wp.kernel
def nested_energy(x: wp.array(dtype=wp.float32), body: Body, energy: wp.array(dtype=wp.float32)):
    i = wp.tid()
    d = x[i] - body.material.rest
    wp.atomic_add(energy, 0, 0.5 * body.material.k * d * d * wp.float32(body.count))


@wp.func
def density(mat: Material, d: wp.float32):
    return 0.5 * mat.k * d * d


@wp.kernel
def energy_through_func(x: wp.array(dtype=wp.float32), mat: Material, energy: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.atomic_add(energy, 0, density(mat, x[i] - mat.rest))
