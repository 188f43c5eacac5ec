// The commands of the synoros tool: each one's flag table (cli/command_table.cpp) and entry point.
#pragma once

#include <string>
#include <vector>

#include "cli/args.hpp"
#include "synoros/gpt.hpp"

namespace synoros::cli {

// The GPT whose training step `memory`, `profile --model gpt` and `plan` show (bench/torch_gpt.py
// builds the same model in PyTorch).
inline const nn::GptConfig kBenchGpt{256, 128, 256, 4, 4};
constexpr int64_t kBenchGptBatch = 8;

struct Command {
  CommandSpec spec;
  int (*run)(const Args&);
};
// Every command, in the order `synoros help` lists them.
const std::vector<Command>& commands();

int train_mlp(const Args&);
int print_plan(const Args&);
int gpt_memory(const Args&);
int profile_model(const Args&);
int info(const Args&);
int peak(const Args&);
int tune(const Args&);
int train_cmd(const Args&);
int eval_cmd(const Args&);
int finetune_cmd(const Args&);
int synth(const Args&);
int trials_cmd(const Args&);
int trials_worker_cmd(const Args&);
int lm_trials_cmd(const Args&);
int export_cmd(const Args&);
int latency_cmd(const Args&);
int generate_cmd(const Args&);

// --threads N: the engine's pool for this process (validated; an Error names the cause).
void apply_threads(const Args& a);
// The whole file as text; Error "cannot read WHAT 'PATH'" when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& what);
// Creates `dir` (and its parents) and checks that files can be written there, before any work;
// Error naming WHAT and the cause otherwise. writable_file: the same for a file's directory.
void writable_dir(const std::string& dir, const std::string& what);
// After a command failed: removes the directories writable_dir created that are still empty (a run
// directory made by the up-front checks of a command that then stopped), never anything else.
void remove_empty_created_dirs();
// replaced: the file is saved by replacing it (write_file_atomic), so a device or FIFO there is an
// error too; otherwise it is written in place (a trace to /dev/stdout).
void writable_file(const std::string& path, const std::string& what, bool replaced = true);

}  // namespace synoros::cli
