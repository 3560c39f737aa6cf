#!/usr/bin/env bash
# Build the separate RLinf environment that `python -m kosmos_env.rlinf_launch` runs in and that
# tests/test_rlinf_run.py (opt-in) trains from.
#
# RLinf is not an extra of this project: rlinf 0.3.0 pulls ray[default], wandb, swanlab, gsutil,
# liger-kernel (and with it triton) and its own dev tools, several GB next to a CUDA torch. It gets
# its own virtualenv, cached under
#   ${KOSMOS_RLINF_VENV:-~/.cache/kosmos-env/rlinf-venv-<rlinf version>-torch<torch version>}
# with torch and torchvision from PyPI (CUDA builds: they run on the CPU too, and the same
# environment serves a GPU machine; PyPI's torchvision cannot load beside the CPU-only torch build)
# and this project installed editable, with its dependencies, so the Kosmos envs and the launcher
# import there. Nothing of RLinf's source is edited: the launcher registers
# the `kosmos` env type at start-up and RLinf's own RLINF_EXT_MODULE hook does the same in every
# Ray worker. Idempotent: a finished environment (marked by .complete) is left alone.
set -euo pipefail
RLINF_VERSION="${RLINF_VERSION:-0.3.0}"
TORCH_VERSION="${TORCH_VERSION:-2.14.1}"
TORCHVISION_VERSION="${TORCHVISION_VERSION:-0.29.1}"
PYTHON="${PYTHON:-python3.11}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${KOSMOS_RLINF_VENV:-$HOME/.cache/kosmos-env/rlinf-venv-${RLINF_VERSION}-torch${TORCH_VERSION}}"
if [[ -f "$VENV/.complete" ]]; then
  echo "$VENV"
  exit 0
fi
start=$(date +%s)
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
pip_install() { "$VENV/bin/pip" install -q "$@"; }
pip_install --upgrade pip "setuptools>=68" wheel
# torch first, and pinned on every later install so no resolve swaps it
TORCH=("torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}")
pip_install "${TORCH[@]}"
# beyond rlinf's declared core dependencies, its embodied entry script imports transformers (<=4.57.6,
# the bound of rlinf's `embodied` extra) and peft (its reward models), regex (rlinf.algorithms) and
# torchvision; the rest of that extra (timm, torchcodec, gym) serves VLA models and is left out.
# transformers 4.x needs huggingface_hub < 1.0, which datasets 5 refuses
pip_install "rlinf==${RLINF_VERSION}" "transformers<=4.57.6" peft regex "datasets<5" "${TORCH[@]}"
pip_install -e "$ROOT" "${TORCH[@]}"
# what RLinf's embodied entry script imports, and the registration the launcher makes
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md

import torch

import kosmos_env.rlinf_launch as launch
import rlinf.envs
import rlinf.runners.embodied_runner  # noqa: F401
import rlinf.workers.actor.fsdp_actor_worker  # noqa: F401
import rlinf.workers.env.env_worker  # noqa: F401
import rlinf.workers.reward.reward_worker  # noqa: F401
import rlinf.workers.rollout.hf.huggingface_worker  # noqa: F401

launch.register()
assert rlinf.envs.get_env_cls("kosmos").__name__ == "KosmosRLinfEnv"
print("rlinf", md.version("rlinf"), "ray", md.version("ray"), "torch", torch.__version__)
PY
touch "$VENV/.complete"
echo "built $VENV in $(($(date +%s) - start)) s, $(du -sh "$VENV" | cut -f1)" >&2
echo "$VENV"
