"""Shared test fixtures: reference models in Pinocchio for the robots under test.

Importing ``bayes_nea`` switches JAX to float64 (the project default). Tests compare with
Pinocchio (``pin``), an implementation we did not write, with gravity set explicitly.
"""

import glob
import os
import shutil
import site
import tempfile

# The suite is bound by XLA compiles, not by running the programs: LLVM's backend optimisations
# off (set before JAX starts its backend; inherited by the xdist workers and the command-line
# subprocesses) cut its time by about a fifth, the run-heavy tests included (measured: the
# start-gradient module 167 -> 130 s, SBC + hybrid pipeline + main job 243 -> 206 s; the whole
# suite 1117 -> 938 s). Results can differ from the default level's in the last bits (e.g.
# fused multiply-adds), so no test may depend on one sampler path's luck.
# BAYES_NEA_TEST_XLA_OPT=1 keeps the default optimisation level.
_NO_OPT = "--xla_backend_optimization_level=0"
if os.environ.get("BAYES_NEA_TEST_XLA_OPT") != "1" and "xla_backend_optimization_level" not in (
    os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _NO_OPT).strip()


# The suite runs the command line's lowering (array constants as arguments of the compiled
# programs), so its tests share the programs of models that differ only in constants (priors,
# normalisers). cli.main imports nothing heavy: JAX is not started yet.
from cli.main import share_programs_across_constants  # noqa: E402

share_programs_across_constants()


def with_xla_optimisation(env: dict) -> dict:
    """``env`` without the suite's optimisation-off flag: for subprocesses that spend their time
    running programs rather than compiling them (the Panda NUTS of the README commands: 106 s
    with optimisations off, 60 s with)."""
    flags = " ".join(f for f in env.get("XLA_FLAGS", "").split() if f != _NO_OPT)
    return {**env, "XLA_FLAGS": flags}


import jax  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402
import pytest  # noqa: E402

import bayes_nea as bn  # noqa: E402

TEST_CACHE_ENV = "BAYES_NEA_TEST_XLA_CACHE"
_OWN_CACHE = pytest.StashKey[str]()


def pytest_configure(config):
    """One persistent XLA compilation cache for this test run, shared by the xdist workers and
    by the command-line subprocesses (``BAYES_NEA_CACHE``): the same programs (a model of the
    same robot, the same likelihood) are compiled in many tests; a run starts with an empty
    cache and removes it at the end, so nothing carries over between runs
    (``BAYES_NEA_TEST_XLA_CACHE=0`` turns it off)."""
    if TEST_CACHE_ENV not in os.environ:  # the controlling process (or a run without xdist)
        os.environ[TEST_CACHE_ENV] = tempfile.mkdtemp(prefix="bayes-nea-test-xla-")
        config.stash[_OWN_CACHE] = os.environ[TEST_CACHE_ENV]
    if os.environ[TEST_CACHE_ENV] == "0":  # opted out: every program compiled where it runs
        return
    jax.config.update("jax_compilation_cache_dir", os.environ[TEST_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_unconfigure(config):
    own = config.stash.get(_OWN_CACHE, None)
    if own:
        shutil.rmtree(own, ignore_errors=True)
        os.environ.pop(TEST_CACHE_ENV, None)


@pytest.fixture(scope="session")
def xla_cache_dir() -> str:
    """The run's shared compilation cache folder (for ``BAYES_NEA_CACHE`` of subprocesses)."""
    return os.environ[TEST_CACHE_ENV]


@pytest.fixture(autouse=True)
def strict_promotion(request):
    """Strict promotion catches accidental float64 in float32 paths and silent broadcasting in
    our own code. NumPyro's samplers and optax's optimisers mix int and float dtypes, so tests
    that run them are marked ``standard_promotion`` and keep JAX's standard rules."""
    if request.node.get_closest_marker("standard_promotion"):
        yield
        return
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs_between_modules():
    """After each test module: clear JAX's caches if the process holds more than half of the
    kernel's memory-mapping limit (``analysis.resources``). One process running the identifiable
    and spec tests back to back reached the limit (65,531 maps) and died in XLA; with xdist each
    worker runs about half the suite."""
    yield
    from analysis.resources import release_compiled_programs

    release_compiled_programs()


GRAVITY = np.array([0.0, 0.0, -9.81])
PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")


def panda_urdf_path() -> str:
    """The Panda URDF shipped by the ``example-robot-data`` package."""
    pattern = "cmeel.prefix/share/example-robot-data/robots/panda_description/urdf/panda.urdf"
    for root in site.getsitepackages():
        found = glob.glob(f"{root}/{pattern}")
        if found:
            return found[0]
    raise FileNotFoundError("example-robot-data is not installed (a test dependency)")


class Reference:
    """A robot of ours next to the same model in Pinocchio, with state conversion."""

    def __init__(self, robot: bn.Robot, model: pin.Model):
        self.robot = robot
        self.model = model
        self.model.gravity.linear = GRAVITY
        self.data = model.createData()
        names = [model.names[i] for i in range(1, model.njoints)]
        assert tuple(names) == robot.joint_names, (names, robot.joint_names)

    def q_pin(self, q: np.ndarray) -> np.ndarray:
        """Our joint angles as Pinocchio's q: continuous joints are a (cos, sin) pair there."""
        out = []
        for i, value in enumerate(np.asarray(q, dtype=float)):
            if self.model.joints[i + 1].nq == 2:
                out += [np.cos(value), np.sin(value)]
            else:
                out.append(value)
        return np.array(out)

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Pinocchio's CRBA at our joint angles ``q``, symmetric (it fills the upper triangle)."""
        M = pin.crba(self.model, self.data, self.q_pin(q))
        return np.triu(M) + np.triu(M, 1).T

    def random_states(self, rng: np.random.Generator, count: int):
        n = self.robot.n
        return (
            rng.uniform(-np.pi, np.pi, (count, n)),
            rng.normal(0, 2, (count, n)),
            rng.normal(0, 3, (count, n)),
        )


def panda_reference() -> Reference:
    path = panda_urdf_path()
    robot = bn.load_urdf(path, lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))
    full = pin.buildModelFromUrdf(path)
    locked = [full.getJointId(name) for name in PANDA_FINGERS]
    return Reference(robot, pin.buildReducedModel(full, locked, pin.neutral(full)))


def urdf_reference(urdf: str, **kwargs) -> Reference:
    """Our loader and Pinocchio's reading the same URDF text."""
    return Reference(bn.load_urdf(urdf, **kwargs), pin.buildModelFromXML(urdf))


def system_reference(name: str) -> Reference:
    """A built-in system; Pinocchio reads its URDF export."""
    robot = bn.get_system(name)
    return Reference(robot, pin.buildModelFromXML(bn.to_urdf(robot)))


# A branching tree: joints listed out of name order, arbitrary axes and placements, fixed joints
# (with mass) in the middle of the tree, a prismatic joint on one branch, a continuous joint.
BRANCHING_URDF = """
<robot name="branching">
  <link name="base"/>
  <link name="torso"><inertial><origin xyz="0.01 0.02 0.1" rpy="0.1 0.2 0.3"/><mass value="3.0"/>
    <inertia ixx="0.05" ixy="0.001" ixz="-0.002" iyy="0.04" iyz="0.003" izz="0.03"/></inertial></link>
  <link name="sensor"><inertial><origin xyz="0.0 0.05 0.0"/><mass value="0.4"/>
    <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.002" iyz="0" izz="0.001"/></inertial></link>
  <link name="right_upper"><inertial><origin xyz="0.2 0 0" rpy="0 0.3 0"/><mass value="1.5"/>
    <inertia ixx="0.004" ixy="0.0002" ixz="0" iyy="0.02" iyz="0.0001" izz="0.021"/></inertial></link>
  <link name="right_lower"><inertial><origin xyz="0.15 0.01 -0.02"/><mass value="0.8"/>
    <inertia ixx="0.002" ixy="0" ixz="0.0001" iyy="0.01" iyz="0" izz="0.011"/></inertial></link>
  <link name="left_slider"><inertial><origin xyz="0 0.05 0.02"/><mass value="1.1"/>
    <inertia ixx="0.003" ixy="0" ixz="0" iyy="0.003" iyz="0" izz="0.002"/></inertial></link>
  <link name="left_wrist"><inertial><origin xyz="0.03 0 0.04"/><mass value="0.5"/>
    <inertia ixx="0.0008" ixy="0.00001" ixz="0" iyy="0.0009" iyz="0" izz="0.0005"/></inertial></link>
  <link name="tool"><inertial><origin xyz="0 0 0.05"/><mass value="0.3"/>
    <inertia ixx="0.0004" ixy="0" ixz="0" iyy="0.0004" iyz="0" izz="0.0001"/></inertial></link>
  <joint name="waist" type="revolute"><parent link="base"/><child link="torso"/>
    <origin xyz="0 0 0.3" rpy="0 0 0.2"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" effort="50" velocity="3"/><dynamics damping="0.1" friction="0.2"/></joint>
  <joint name="z_sensor_mount" type="fixed"><parent link="torso"/><child link="sensor"/>
    <origin xyz="0.05 0 0.2" rpy="0.3 -0.2 0.1"/></joint>
  <joint name="right_shoulder" type="revolute"><parent link="sensor"/><child link="right_upper"/>
    <origin xyz="0 -0.2 0.1" rpy="0.4 0.1 -0.3"/><axis xyz="0.3 0.5 0.8"/>
    <limit lower="-2" upper="2" effort="30" velocity="4"/></joint>
  <joint name="right_elbow" type="continuous"><parent link="right_upper"/><child link="right_lower"/>
    <origin xyz="0.4 0 0" rpy="0 0 0"/><axis xyz="0 1 0"/></joint>
  <joint name="left_slide" type="prismatic"><parent link="torso"/><child link="left_slider"/>
    <origin xyz="0 0.2 0.1" rpy="-0.2 0 0.5"/><axis xyz="1 1 0"/>
    <limit lower="-0.3" upper="0.3" effort="100" velocity="1"/></joint>
  <joint name="left_wrist" type="revolute"><parent link="left_slider"/><child link="left_wrist"/>
    <origin xyz="0.1 0.1 0" rpy="0 0.5 0"/><axis xyz="1 0 0"/>
    <limit lower="-2" upper="2" effort="10" velocity="5"/></joint>
  <joint name="tool_mount" type="fixed"><parent link="left_wrist"/><child link="tool"/>
    <origin xyz="0 0 0.08" rpy="0 0 1.0"/></joint>
</robot>
"""


@pytest.fixture(scope="session")
def panda() -> Reference:
    return panda_reference()


@pytest.fixture(scope="session")
def branching() -> Reference:
    return urdf_reference(BRANCHING_URDF)


REFERENCE_FACTORIES = {
    "panda": panda_reference,
    "cartpole": lambda: system_reference("cartpole"),
    "furuta": lambda: system_reference("furuta"),
    "branching": lambda: urdf_reference(BRANCHING_URDF),
}


@pytest.fixture(scope="session", params=sorted(REFERENCE_FACTORIES))
def reference(request) -> Reference:
    """Each robot under test with its Pinocchio twin."""
    return REFERENCE_FACTORIES[request.param]()
