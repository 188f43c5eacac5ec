// Baseline x86-64 build of the elementwise line kernels.
#define SYNOROS_ISA_NS scalar
#include "kernels/cpu/map_lines_impl.hpp"
