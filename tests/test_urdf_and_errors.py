"""URDF loading (order, merging, export) and the errors that bad input gets."""

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import BRANCHING_URDF

import bayes_nea as bn

LINK = '<link name="{name}"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>'


def urdf(joints: str, links=("base", "a", "b")) -> str:
    body = "".join(LINK.format(name=n) if n != "base" else '<link name="base"/>' for n in links)
    return f'<robot name="t">{body}{joints}</robot>'


def joint(name, kind, parent, child, extra=""):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/>{extra}</joint>'
    )


def test_branching_tree_merges_fixed_joints(branching):
    robot = branching.robot
    assert robot.joint_names == (
        "waist",
        "left_slide",
        "left_wrist",
        "right_shoulder",
        "right_elbow",
    )
    assert robot.parents == (-1, 0, 1, 0, 3)
    assert robot.joint_types[1] == "prismatic" and robot.continuous[4]
    total = 3.0 + 0.4 + 1.5 + 0.8 + 1.1 + 0.5 + 0.3
    assert np.isclose(np.sum(robot.nominal.theta[:, 0]), total)
    assert robot.damping[0] == 0.1 and robot.friction[0] == 0.2
    assert robot.effort_limit[3] == 30 and robot.lower[1] == -0.3


def test_export_round_trip(branching):
    robot = branching.robot
    again = bn.load_urdf(bn.to_urdf(robot))
    for f in dataclasses.fields(robot):
        if f.name not in ("nominal", "body_names"):
            assert getattr(again, f.name) == getattr(robot, f.name), f.name
    for ours, theirs in zip(again.nominal, robot.nominal, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_load_from_file(tmp_path):
    path = tmp_path / "robot.urdf"
    path.write_text(BRANCHING_URDF)
    assert bn.load_urdf(path).n == 5
    assert bn.load_urdf(str(path)).joint_names[0] == "waist"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<robot", "malformed URDF"),
        ("<model/>", "expected <robot>"),
        (urdf(joint("j", "floating", "base", "a")), "floating joints are not supported"),
        (urdf(joint("j", "planar", "base", "a")), "planar joints are not supported"),
        (urdf(joint("j", "ball", "base", "a")), "unknown type 'ball'"),
        (
            urdf(joint("j", "revolute", "base", "a") + joint("k", "revolute", "a", "c")),
            "unknown child link 'c'",
        ),
        (
            urdf(
                joint("j", "revolute", "base", "a")
                + joint("k", "revolute", "a", "b")
                + joint("l", "revolute", "b", "a")
            ),
            "closed kinematic loop",
        ),
        (urdf(joint("j", "revolute", "base", "a")), "exactly one root link"),
        (
            urdf(joint("j", "revolute", "base", "a"), links=("base", "a")).replace(
                'value="1"', 'value="0"'
            ),
            "carries no mass",
        ),
        (
            urdf(
                joint("j", "revolute", "base", "a")
                + joint("k", "revolute", "a", "b", '<mimic joint="j"/>')
            ),
            "mimic",
        ),
        (
            urdf(joint("j", "revolute", "base", "a"), links=("base", "a")).replace(
                'value="1"', 'value="abc"'
            ),
            "is not a number",
        ),
        (
            urdf(joint("j", "revolute", "base", "a"), links=("base", "a")).replace(
                '<axis xyz="0 0 1"/>', '<axis xyz="0 0"/>'
            ),
            "expected 3 finite numbers",
        ),
        (urdf(joint("j", "fixed", "base", "a"), links=("base", "a")), "no movable joints"),
        ("/no/such/file.urdf", "does not exist"),
    ],
)
def test_bad_urdf_is_refused_with_a_clear_message(text, message):
    with pytest.raises(ValueError, match=message):
        bn.load_urdf(text)


def test_point_mass_on_revolute_axis_is_singular():
    text = urdf(joint("j", "revolute", "base", "a"), links=("base", "a"))
    text = (
        text.replace('ixx="0.1"', 'ixx="0"')
        .replace('iyy="0.1"', 'iyy="0"')
        .replace('izz="0.1"', 'izz="0"')
    )
    with pytest.raises(ValueError, match="no inertia about its axis"):
        bn.load_urdf(text)


def test_unknown_joint_names():
    with pytest.raises(ValueError, match=r"lock_joints names unknown joints \['nope'\]"):
        bn.load_urdf(BRANCHING_URDF, lock_joints={"nope": 0.0})
    with pytest.raises(ValueError, match="unknown joint 'nope'.*waist"):
        bn.load_urdf(BRANCHING_URDF).joint_index("nope")
    with pytest.raises(ValueError, match="unknown system 'segway'.*cartpole"):
        bn.get_system("segway")


def test_locked_joint_moves_the_merged_body():
    """Locking a prismatic joint at +0.1 shifts the merged mass by 0.1 along its axis."""
    text = urdf(joint("j", "revolute", "base", "a") + joint("k", "prismatic", "a", "b"))
    at0 = bn.load_urdf(text, lock_joints={"k": 0.0}).nominal.theta[0]
    at1 = bn.load_urdf(text, lock_joints={"k": 0.1}).nominal.theta[0]
    assert np.isclose(at1[3] - at0[3], 1.0 * 0.1)  # h_z of body "b" (mass 1) moved by 0.1


@pytest.mark.parametrize("name", ["rnea", "aba"])
def test_state_shape_errors(name):
    robot = bn.cartpole()
    fn = getattr(bn, name)
    with pytest.raises(ValueError, match=r"qd has shape \(3,\), expected \(2,\)"):
        fn(robot, jnp.zeros(2), jnp.zeros(3), jnp.zeros(2))
    with pytest.raises(ValueError, match=r"f_ext has shape \(2, 3\)"):
        fn(robot, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), f_ext=jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"q has shape \(5, 2\).*jax.vmap"):
        bn.crba(robot, jnp.zeros((5, 2)))


def test_robot_constructor_errors():
    kwargs = dict(
        joint_names=("a", "b"),
        parents=(-1, 0),
        joint_types=("revolute", "revolute"),
        axes=[(0, 0, 1), (0, 0, 1)],
        theta=np.tile(np.eye(1, 10, 0)[0], (2, 1)),
        rpy=np.zeros((2, 3)),
        xyz=np.zeros((2, 3)),
    )
    bn.make_robot("ok", **kwargs)
    with pytest.raises(ValueError, match="parents must precede"):
        bn.make_robot("bad", **{**kwargs, "parents": (1, -1)})
    with pytest.raises(ValueError, match="kind 'ball'"):
        bn.make_robot("bad", **{**kwargs, "joint_types": ("ball", "revolute")})
    with pytest.raises(ValueError, match="zero axis"):
        bn.make_robot("bad", **{**kwargs, "axes": [(0, 0, 0), (0, 0, 1)]})
    with pytest.raises(ValueError, match="NaN or inf"):
        bn.make_robot("bad", **{**kwargs, "xyz": np.full((2, 3), np.nan)})
    with pytest.raises(ValueError, match=r"theta has shape \(1, 10\)"):
        bn.make_robot("bad", **{**kwargs, "theta": np.zeros((1, 10))})


def test_float32_jit_vmap_grad(branching):
    robot = branching.robot
    rng = np.random.default_rng(5)
    q, qd, qdd = (jnp.asarray(x, jnp.float32) for x in branching.random_states(rng, 3))
    tau32 = jax.jit(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c)))(q, qd, qdd)
    qdd32 = jax.jit(jax.vmap(lambda a, b, c: bn.aba(robot, a, b, c)))(q, qd, tau32)
    assert tau32.dtype == jnp.float32 and qdd32.dtype == jnp.float32
    tau64 = jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c))(
        *(x.astype(jnp.float64) for x in (q, qd, qdd))
    )
    np.testing.assert_allclose(tau32, tau64, rtol=1e-4, atol=1e-4 * np.abs(tau64).max())
    np.testing.assert_allclose(qdd32, qdd, rtol=1e-3, atol=1e-3 * np.abs(qdd).max())
    params32 = robot.params(jnp.float32)
    g = jax.grad(lambda p: jnp.sum(bn.aba(robot, q[0], qd[0], tau32[0], params=p) ** 2))(params32)
    assert g.theta.dtype == jnp.float32 and np.all(np.isfinite(g.theta))
    assert bn.crba(robot, q[0]).dtype == jnp.float32
    assert bn.joint_torque_regressor(robot, q[0], qd[0], qdd[0]).dtype == jnp.float32


def test_robot_is_a_pytree_for_jit():
    robot = bn.furuta()
    f = jax.jit(lambda r, q: bn.crba(r, q))
    M = f(robot, jnp.zeros(2))
    heavier = robot.replace(nominal=robot.nominal._replace(theta=2 * robot.nominal.theta))
    np.testing.assert_allclose(f(heavier, jnp.zeros(2)), 2 * M, rtol=1e-12)


def test_robots_are_equal_by_value():
    robot = bn.furuta()
    again = [
        bn.furuta(),
        bn.robot_from_dict(bn.robot_to_dict(robot)),
        pickle.loads(pickle.dumps(robot)),
    ]
    for other in again:
        assert other is not robot and other == robot and hash(other) == hash(robot)
    heavier = robot.replace(nominal=robot.nominal._replace(theta=2 * robot.nominal.theta))
    tilted = robot.replace(gravity=(0.0, -9.81, 0.0))
    assert heavier != robot and tilted != robot and bn.cartpole() != robot
    assert len({robot, *again, heavier, tilted}) == 3

    seen = []  # a robot passed through jit as an argument (traced parameters) equals only itself
    jax.jit(lambda r: seen.append(r) or r.nominal.theta.sum())(robot)
    assert seen[0] == seen[0] and seen[0] != robot and robot != seen[0]


def test_equal_robots_share_the_traced_dynamics():
    """A robot loaded again reuses the jaxpr that an equal robot's dynamics traced (the robot is
    a static argument of every traced algorithm), so transformations of it are cached too."""
    q = jnp.zeros(2)

    def inner_jaxpr(robot):
        (eqn,) = [
            e
            for e in jax.make_jaxpr(lambda x: bn.rnea(robot, x, x, x))(q).eqns
            if "jaxpr" in e.params
        ]
        return eqn.params["jaxpr"]

    first = inner_jaxpr(bn.furuta())
    assert inner_jaxpr(bn.furuta()) is first
    assert inner_jaxpr(bn.robot_from_dict(bn.robot_to_dict(bn.furuta()))) is first
    heavier = bn.furuta().replace(
        nominal=bn.furuta().nominal._replace(theta=2 * bn.furuta().nominal.theta)
    )
    assert inner_jaxpr(heavier) is not first
