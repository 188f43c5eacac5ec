// Umbrella header: the whole public API.
#pragma once

#include "synoros/autodiff.hpp"
#include "synoros/core.hpp"
#include "synoros/ir.hpp"
#include "synoros/oracle.hpp"
#include "synoros/runtime.hpp"
#include "synoros/tensor.hpp"
#include "synoros/tiny_mlp.hpp"
#include "synoros/gpt.hpp"
#include "synoros/profile.hpp"
#include "synoros/nn.hpp"
#include "synoros/optim.hpp"
#include "synoros/train.hpp"
#include "synoros/data.hpp"
#include "synoros/checkpoint.hpp"
#include "synoros/plot.hpp"
#include "synoros/synth.hpp"
