#!/usr/bin/env bash
# Build the separate LeRobot environment that tests/policies/test_lerobot_remote.py serves a policy from.
#
# LeRobot cannot share an environment with this project (its releases pin torch < 2.8/2.11 or
# gymnasium < 1.0), so it gets its own virtualenv, cached under
#   ${KOSMOS_LEROBOT_VENV:-~/.cache/kosmos-env/lerobot-venv-<lerobot version>-torch<torch version>}
# The project itself is installed there without dependencies (editable) so the LeRobot adapter
# and the policy protocol are importable; nothing of gymnasium 1.x is needed on that side.
# Takes a few minutes (downloads LeRobot's dependencies from PyPI). Idempotent: a finished
# environment (marked by .complete) is left alone.
set -euo pipefail
LEROBOT_VERSION="${LEROBOT_VERSION:-0.3.2}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3.11}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${KOSMOS_LEROBOT_VENV:-$HOME/.cache/kosmos-env/lerobot-venv-${LEROBOT_VERSION}-torch${TORCH_VERSION}}"
if [[ -f "$VENV/.complete" ]]; then
  echo "$VENV"
  exit 0
fi
start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip "setuptools>=68" wheel
"$VENV/bin/pip" install -q "torch==${TORCH_VERSION}"
"$VENV/bin/pip" install -q "lerobot==${LEROBOT_VERSION}" "torch==${TORCH_VERSION}"
# PyPI's torchvision is built against CUDA torch; beside the CPU torch its compiled ops cannot load
# and two unconditional fake-op registrations make `import torchvision` fail. LeRobot's ACT and
# Diffusion need only its Python parts (models, transforms): guard those two registrations.
"$VENV/bin/python" - <<'PY'
import pathlib, sysconfig
path = pathlib.Path(sysconfig.get_paths()["purelib"]) / "torchvision" / "_meta_registrations.py"
text = path.read_text()
for op in ("nms", "qnms"):
    old = f'@torch.library.register_fake("torchvision::{op}")'
    new = f'@(torch.library.register_fake("torchvision::{op}") if torchvision.extension._has_ops() else (lambda fn: fn))'
    text = text.replace(old, new)
path.write_text(text)
PY
"$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT"
# what `kosmos-env serve-policy` imports to build its parser, beyond LeRobot's own dependencies
"$VENV/bin/pip" install -q scipy "torch==${TORCH_VERSION}"
"$VENV/bin/python" -c "import lerobot, torch; from lerobot.policies.act.modeling_act import ACTPolicy; print('lerobot', lerobot.__version__ if hasattr(lerobot, '__version__') else '?', 'torch', torch.__version__)"
touch "$VENV/.complete"
echo "built $VENV in $(( $(date +%s) - start )) s" >&2
echo "$VENV"
