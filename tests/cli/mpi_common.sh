# Sourced by the tests that run under mpirun: $1 is the synoros binary, $2 mpirun; a scratch
# directory removed at exit; Open MPI allowed to run as root and to put several ranks on a core.
set -euo pipefail
synoros=$1
mpirun=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
