// Baseline x86-64 build of the 3x3 convolution's transforms.
#define SYNOROS_ISA_NS scalar
#include "kernels/cpu/winograd_impl.hpp"
