#!/usr/bin/env bash
# Your own robot from the command line (README, "Your own robot"): a URDF and a CSV log in, a
# posterior, a rollout band over the log and a tracking check on every posterior draw out.
# Run from the repository root after the README's install: bash examples/own_robot.sh
# (outputs in own-robot/). These are the README's commands, line for line (a test checks it).
set -euo pipefail
.venv/bin/pip install -q example-robot-data    # the URDF used here (in the test extras already)
BN=$PWD/.venv/bin/bayes-nea
ROBOTS=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/cmeel.prefix/share/example-robot-data/robots
URDF=$ROBOTS/panda_description/urdf/panda.urdf
LOCK="--lock-joint panda_finger_joint1 --lock-joint panda_finger_joint2"
mkdir -p own-robot && cd own-robot
$BN simulate --urdf $URDF $LOCK --duration 10 --seed 1 --out log.csv
$BN import --urdf $URDF $LOCK --log log.csv --out panda.npz
FIT="--variant diffnea/viscous/informative --data panda.npz --likelihood inverse --geometry identifiable"
$BN fit $FIT --steps 3000 --polish --out map.nc
$BN fit $FIT --method nuts --init map.nc --warmup 300 --samples 300 --out posterior.nc
$BN rollout posterior.nc --data panda.npz --seconds 1 --draws 200 --out replay.png
$BN check-controller posterior.nc --excitation 5 --draws 200 --out tracking.png
