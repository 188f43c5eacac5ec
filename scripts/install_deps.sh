#!/usr/bin/env bash
# Installs the Debian 12 packages Synoros needs, skipping what is already there; with package
# names as arguments, those instead (scripts/fuzz.sh installs clang this way).
set -euo pipefail
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(build-essential cmake ninja-build libgtest-dev libbenchmark-dev libopenblas-dev python3
      python3-dev python3-venv python3-numpy
      python3-torch python3-threadpoolctl zlib1g-dev nlohmann-json3-dev libdnnl-dev libxsmm-dev
      openmpi-bin libopenmpi-dev
      dataset-fashion-mnist fortunes)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
