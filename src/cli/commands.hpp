#pragma once

namespace synoros::cli {
int train_mlp(int argc, char** argv);
int print_plan(int argc, char** argv);
int gpt_memory();
int profile_model(int argc, char** argv);
int info();
int peak();
int tune();
int train_cmd(int argc, char** argv);
int eval_cmd(int argc, char** argv);
int synth(int argc, char** argv);
int search_cmd(int argc, char** argv);
int search_worker_cmd(int argc, char** argv);
int export_cmd(int argc, char** argv);
int latency_cmd(int argc, char** argv);
}  // namespace synoros::cli
