"""The library's Warp kernels: rigid bodies with a pose (``wp.transform``) and an orientation (``wp.quat``).

Per body ``i``: pose ``x[i]`` (position and rotation, JAX shape ``(n, 7)``), orientation ``q[i]`` (JAX ``(n, 4)``,
kept equal to the pose's rotation), linear velocity ``v[i]`` and angular velocity ``w[i]`` (``(n, 3)``), and
parameters ``params[i] = (stiffness, damping, spin torque)`` as a 2-D float32 array ``(n, 3)``.
"""

import warp as wp


@wp.kernel
def init_bodies(
    seed: wp.array(dtype=wp.float32),
    x: wp.array(dtype=wp.transform),
    q: wp.array(dtype=wp.quat),
    v: wp.array(dtype=wp.vec3),
    w: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    s = seed[i]
    axis = wp.normalize(wp.vec3(1.0, s, 0.5 - s))
    rot = wp.quat_from_axis_angle(axis, 0.7 * s)
    q[i] = rot
    x[i] = wp.transform(wp.vec3(s, 0.05 * s, -s), rot)
    v[i] = wp.vec3(0.1 * s, 0.0, -0.2)
    w[i] = wp.vec3(1.0, 2.0 * s, -0.5)


@wp.kernel
def apply_forces(
    x: wp.array(dtype=wp.transform),
    params: wp.array2d[wp.float32],
    dt: float,
    v: wp.array(dtype=wp.vec3),
    w: wp.array(dtype=wp.vec3),
):
    # v and w are updated in place (in-out)
    i = wp.tid()
    p = wp.transform_get_translation(x[i])
    stiffness = params[i, 0]
    damping = params[i, 1]
    spin = params[i, 2]
    gravity = wp.vec3(0.0, -9.81, 0.0)
    v[i] = v[i] + dt * (gravity - stiffness * p - damping * v[i])
    torque = wp.quat_rotate(wp.transform_get_rotation(x[i]), wp.vec3(0.0, 0.0, spin))
    w[i] = w[i] + dt * (torque - damping * w[i])


@wp.kernel
def integrate(
    dt: float,
    v: wp.array(dtype=wp.vec3),
    w: wp.array(dtype=wp.vec3),
    x: wp.array(dtype=wp.transform),
    q: wp.array(dtype=wp.quat),
):
    # x and q are updated in place
    i = wp.tid()
    r = q[i]
    omega = w[i]
    dq = wp.quat(omega[0], omega[1], omega[2], 0.0) * r * 0.5
    r_new = wp.normalize(r + dq * dt)
    q[i] = r_new
    x[i] = wp.transform(wp.transform_get_translation(x[i]) + v[i] * dt, r_new)


@wp.kernel
def ground_contact(
    height: float,
    x: wp.array(dtype=wp.transform),
    v: wp.array(dtype=wp.vec3),
    x_out: wp.array(dtype=wp.transform),
    v_out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    p = wp.transform_get_translation(x[i])
    vel = v[i]
    if p[1] < height:
        p = wp.vec3(p[0], height, p[2])
        vel = wp.vec3(vel[0], -0.5 * vel[1], vel[2])
    x_out[i] = wp.transform(p, wp.transform_get_rotation(x[i]))
    v_out[i] = vel


@wp.kernel
def kinetic_energy(v: wp.array(dtype=wp.vec3), w: wp.array(dtype=wp.vec3), e: wp.array(dtype=wp.float32)):
    i = wp.tid()
    e[i] = 0.5 * (wp.dot(v[i], v[i]) + wp.dot(w[i], w[i]))
