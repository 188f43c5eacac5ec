#!/usr/bin/env bash
# The peers' environment for side-by-side benchmarks: PyTorch 2.x from PyPI in a virtual
# environment at .peers/ (the wheel is large; neither the tests nor CI need it). The comparison
# scripts take its interpreter with --python .peers/bin/python, which adds torch.compile rows.
#   bash scripts/install_peers.sh            # the newest PyTorch 2.x
#   TORCH_SPEC='torch==2.5.1' bash scripts/install_peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
"$python" -c 'import sys; assert sys.version_info >= (3, 9), "Python 3.9 or newer is needed"'
[ -x .peers/bin/python ] || "$python" -m venv .peers
.peers/bin/python -m pip install --quiet --upgrade pip
.peers/bin/python -m pip install --quiet "${TORCH_SPEC:-torch>=2,<3}" numpy
.peers/bin/python -c 'import torch; print("peers: PyTorch", torch.__version__, "at .peers/bin/python")'
