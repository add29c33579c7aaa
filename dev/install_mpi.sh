#!/usr/bin/env bash
# dev/install_mpi.sh: installs Open MPI from Debian's packages (openmpi-bin, libopenmpi-dev) when
# mpicc or mpirun is missing, so that `make` builds the trainers with MPI and `make test` runs the
# multi-process tests. Needs root and apt-get; otherwise (or when the install fails) it says so and
# exits 0: the trainers then build as one process and the multi-process tests skip.
set -u
if command -v mpicc > /dev/null 2>&1 && command -v mpirun > /dev/null 2>&1; then
    echo "install_mpi: $(mpirun --version 2>/dev/null | head -n 1) already installed"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null 2>&1; then
    echo "install_mpi: MPI not installed, and this is not root with apt-get: install openmpi-bin and libopenmpi-dev"
    exit 0
fi
echo "install_mpi: apt-get install openmpi-bin libopenmpi-dev"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev; } > /tmp/install_mpi.log 2>&1; then
    tail -n 5 /tmp/install_mpi.log
    echo "install_mpi: the install failed (log above): the multi-process tests will skip"
    exit 0
fi
echo "install_mpi: $(mpirun --version 2>/dev/null | head -n 1) installed"
