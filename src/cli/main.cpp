// The synoros command-line tool.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/commands.hpp"
#include "synoros/synoros.hpp"

namespace {
void usage() {
  std::cout << "usage: synoros <command> [options]\n"
               "  train --model mlp|lenet|resnet-mini|gpt-tiny [--data fashion-mnist|fortunes] [--epochs N]\n"
               "        [--batch B] [--lr X] [--optimizer sgd|adamw] [--augment] [--steps N] [--threads N]\n"
               "        [--out DIR] [--save PATH] [--resume PATH] [--train-limit N] [--no-progress] [--json]\n"
               "        [--operator ACTIONS [--mask M]]   (resnet-mini with a searched operator)\n"
               "                                   train on real data: progress, metrics, logs, curves, checkpoints\n"
               "  eval --model M --checkpoint PATH test accuracy (or validation loss and a sample for gpt-tiny)\n"
               "  train-mlp [--steps N] [--lr X]   train the tiny MLP on a synthetic regression task\n"
               "  plan [--no-fusion] [--no-plan]   print the compiled plan of one tiny-MLP SGD step\n"
               "  memory                           peak bytes of one GPT training step (JSON)\n"
               "  profile [--model mlp|gpt|lenet|resnet-mini] [--inference] [--iterations N] [--trace FILE]\n"
               "                                   time every launch of one training step\n"
               "  info                             instruction set and thread count in use\n"
               "  peak                             measured one-core FMA rate and bandwidth (JSON)\n"
               "  tune                             select and cache kernels for the built-in models\n"
               "  search [--iterations N] [--candidates N] [--rounds N] [--workers N] [--train-images N]\n"
               "         [--latency-target X] [--report DIR]   operator search with training and latency\n"
               "         (mpirun -np N synoros search ...: rank 0 searches, the other ranks train)\n"
               "  export --operator ACTIONS [--mask M] [--batch N] [--out DIR]   a searched operator as PyTorch\n"
               "                                   modules, one per replaced layer class\n"
               "  latency --operator ACTIONS [--mask M] [--rounds N] [--json FILE]   its network against the\n"
               "                                   convolutional one, timed interleaved (batch 64 and 1, 1 and 2 threads)\n"
               "  synth [--conv2d|--spec S] [--mode enumerate|mcts|...]  synthesize operators (synth --help)\n";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "train-mlp") return synoros::cli::train_mlp(argc - 2, argv + 2);
    if (cmd == "train") return synoros::cli::train_cmd(argc - 2, argv + 2);
    if (cmd == "eval") return synoros::cli::eval_cmd(argc - 2, argv + 2);
    if (cmd == "plan") return synoros::cli::print_plan(argc - 2, argv + 2);
    if (cmd == "memory") return synoros::cli::gpt_memory();
    if (cmd == "profile") return synoros::cli::profile_model(argc - 2, argv + 2);
    if (cmd == "info") return synoros::cli::info();
    if (cmd == "peak") return synoros::cli::peak();
    if (cmd == "tune") return synoros::cli::tune();
    if (cmd == "synth") return synoros::cli::synth(argc - 2, argv + 2);
    if (cmd == "search") return synoros::cli::search_cmd(argc - 2, argv + 2);
    if (cmd == "search-worker") return synoros::cli::search_worker_cmd(argc - 2, argv + 2);
    if (cmd == "export") return synoros::cli::export_cmd(argc - 2, argv + 2);
    if (cmd == "latency") return synoros::cli::latency_cmd(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      usage();
      return 0;
    }
    std::cerr << "synoros: unknown command '" << cmd << "'\n";
    usage();
    return 2;
  } catch (const synoros::Error& e) {
    std::cerr << "synoros: error: " << e.what() << "\n";
    return 1;
  }
}
