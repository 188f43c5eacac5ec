// Every command's flags: type, range, default and meaning. Parsing and `--help` both read this.
#include <limits>

#include "cli/commands.hpp"
#include "synoros/config.hpp"
#include "synoros/runtime.hpp"

namespace synoros::cli {

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr double kRMax = std::numeric_limits<double>::max();
// Large enough for any real run, small enough that a typo fails at once instead of looping for
// years or allocating the machine away.
constexpr int64_t kMaxSteps = 1'000'000'000, kMaxEpochs = 1'000'000, kMaxImages = 100'000'000;

Opt fast_opt() {
  return flag("fast",
              "fast mode: kernels that round differently (vendor GEMMs, oneDNN convolutions) may be chosen; "
              "checkpoints record and replay the choices (also SYNOROS_FAST=1)");
}

Opt threads_opt() {
  return integer_words("threads", "all cores, or SYNOROS_NUM_THREADS", 1, config::kMaxThreads, "engine threads");
}

CommandSpec train_spec() {
  CommandSpec s{"train",
                "train a classifier on Fashion-MNIST or a GPT on fortunes or any text file: progress, metrics, logs, "
                "curves, checkpoints",
                "The run directory (--out) gets log.csv, log.json, curves.svg and checkpoint.safetensors; a\n"
                "resumed run (--resume) appends to the logs and continues bit for bit. --resume refuses a\n"
                "checkpoint whose model, data or schedule differ from the command's.\n"
                "Data-parallel: `mpirun -np N synoros train ...` shares each step's micro-shards (--shards,\n"
                "or --accum for GPT models) among N ranks; the checkpoint is the same bytes for every N.",
                {},
                {{"classifier", "mlp, lenet and resnet-mini"}, {"lm", "gpt-tiny, gpt2-11m, gpt2-98m and gpt2-124m"}}};
  s.opts = {
      choice("model", "resnet-mini", "mlp|lenet|resnet-mini|gpt-tiny|gpt2-11m|gpt2-98m|gpt2-124m", "the model to train"),
      text("data", "fashion-mnist (classifiers), fortunes (GPT models)",
           "the data set: fashion-mnist, fortunes, or (GPT models) a text file's path"),
      path("data-dir", "SYNOROS_DATA_DIR / SYNOROS_FORTUNES_DIR, else the Debian package's", "where the data set lies"),
      integer("epochs", 10, 1, kMaxEpochs, "passes over the training set", "classifier"),
      integer_words("steps", "epochs x steps per epoch (classifiers), 1000 (GPT models)", 1, kMaxSteps,
                    "training steps in all (classifiers: ends the schedule early, within the last epoch)"),
      integer_words("batch", "64 (classifiers), 16 (gpt-tiny)", 1, 1 << 20, "batch size"),
      real("lr", "0.05 (sgd), 2e-3 (adamw), 3e-3 (gpt-tiny), 6e-4 (gpt2-*)", 1e-12, 100, "peak learning rate"),
      choice("optimizer", "sgd", "sgd|adamw", "optimizer", "classifier"),
      real("momentum", "0.9", 0, 0.999999, "SGD momentum (sgd only)", "classifier"),
      real("weight-decay", "5e-4 (classifiers), 0.01 (GPT models)", 0, 10, "weight decay"),
      real("clip", "0 (classifiers: off), 1 (GPT models)", 0, 1e12, "gradient clipping norm (0: off)"),
      integer_words("warmup", "0 (classifiers), 50 (GPT models)", 0, kMaxSteps, "linear warmup steps"),
      integer("seed", 1, 0, kMax, "seed of initialisation and data order"),
      integer_words("train-limit", "0 (all)", 0, kMaxImages, "use only the first N training images", "classifier"),
      integer_words("test-limit", "0 (all)", 0, kMaxImages, "use only the first N test images", "classifier"),
      flag("augment", "random crops (pad 2) and horizontal flips", "classifier"),
      path("out", "runs/MODEL", "run directory"),
      path("save", "OUT/checkpoint.safetensors", "checkpoint path"),
      path("resume", "", "continue from this checkpoint"),
      path("save-init", "", "also save the initial weights here (for side-by-side runs)", "classifier"),
      threads_opt(),
      fast_opt(),
      integer_words("context", "the model's", 2, 1 << 16, "context length", "lm"),
      integer_words("width", "the model's", 1, 1 << 16, "model width", "lm"),
      integer_words("layers", "the model's", 1, 1024, "transformer blocks", "lm"),
      integer_words("heads", "the model's", 1, 1024, "attention heads (must divide the width)", "lm"),
      integer("eval-every", 200, 1, kMaxSteps, "steps between validations and checkpoints", "lm"),
      integer("accum", 1, 1, 1 << 16,
              "gradient accumulation: micro-batches of --batch per optimizer step (the micro-shards mpirun's ranks share)",
              "lm"),
      flag("checkpoint-activations",
           "recompute each block's activations in the backward pass instead of keeping them (less memory, the "
           "same bits)",
           "lm"),
      integer("shards", 1, 1, 1 << 16,
              "micro-shards of each batch, folded in a fixed order (mpirun's ranks share them; the bits depend on "
              "--shards, not on the rank count)",
              "classifier"),
      text("prompt", "'The '", "prompt of the sample printed at the end", "lm"),
      integer("sample", 300, 0, 1 << 20, "bytes to sample at the end", "lm"),
      text("operator", "", "an action path from a trials report: resnet-mini's 3x3 convolutions (trials) or the GPT's "
           "projections (lm-trials) of the classes of --mask take that operator"),
      integer_words("mask", "7 (resnet-mini), 15 (GPT)", 1, 255,
                    "layer classes that take --operator (bit i: class i; GPT: c_attn, attn.c_proj, c_fc, mlp.c_proj)"),
      flag("no-progress", "no progress bar"),
      flag("json", "print a JSON summary at the end"),
  };
  return s;
}

CommandSpec finetune_spec() {
  CommandSpec s{"finetune",
                "fine-tune a GPT-2 model on fortunes or any text file: LoRA adapters (PEFT's names) or every parameter",
                "The base is any file `generate --model` reads (Hugging Face's GPT-2 layout, a file written by the\n"
                "library, a `synoros train` checkpoint). With --lora-rank > 0 the base stays frozen and only the\n"
                "adapters train; the run directory gets adapter/ (adapter_model.safetensors and\n"
                "adapter_config.json, as PEFT's save_pretrained writes them) beside the usual logs and\n"
                "checkpoint, and --merge adds merged.safetensors (the base with the adapters folded in).\n"
                "--resume refuses a checkpoint of another base (by a hash of its values) or configuration.",
                {},
                {}};
  s.opts = {
      path("base", "", "the model to adapt (required)"),
      integer("lora-rank", 8, 0, 65536, "LoRA rank (0: train every parameter instead)"),
      real("lora-alpha", "2 x rank", 1e-12, 1e12, "LoRA alpha: updates are scaled by alpha / rank"),
      text("lora-targets", "c_attn,c_proj,c_fc", "projections to adapt (PEFT's target_modules; also attn.c_proj, mlp.c_proj)"),
      flag("merge", "at the end, also save the base with the adapters merged in (OUT/merged.safetensors)"),
      text("data", "fortunes", "fortunes, or a text file's path"),
      path("data-dir", "SYNOROS_FORTUNES_DIR, else the Debian package's", "where the fortunes lie"),
      integer_words("sequence", "the model's context", 1, 1 << 16, "training window length"),
      integer("steps", 200, 1, kMaxSteps, "training steps"),
      integer("batch", 8, 1, 1 << 20, "batch size (of each micro-batch with --accum)"),
      integer("accum", 1, 1, 1 << 16, "gradient accumulation: micro-batches per optimizer step"),
      flag("checkpoint-activations", "recompute each block's activations in the backward pass (less memory)"),
      real("lr", "1e-3 (LoRA), 1e-4 (every parameter)", 1e-12, 100, "peak learning rate (AdamW, warmup, cosine)"),
      real("weight-decay", "0", 0, 10, "AdamW weight decay"),
      real("clip", "1", 0, 1e12, "gradient clipping norm (0: off)"),
      integer("warmup", 20, 0, kMaxSteps, "linear warmup steps"),
      integer("seed", 1, 0, kMax, "seed of the adapters' initialisation and the data order"),
      path("out", "runs/finetune", "run directory"),
      path("save", "OUT/checkpoint.safetensors", "checkpoint path"),
      path("resume", "", "continue from this checkpoint"),
      integer("eval-every", 50, 1, kMaxSteps, "steps between validations and checkpoints"),
      text("prompt", "'The '", "prompt of the sample printed at the end"),
      integer("sample", 200, 0, 1 << 20, "bytes to sample at the end"),
      threads_opt(),
      fast_opt(),
      flag("no-progress", "no progress bar"),
  };
  return s;
}

CommandSpec eval_spec() {
  CommandSpec s{"eval",
                "evaluate a checkpoint: test accuracy (classifiers) or validation loss and a sample (GPT models)",
                "The model, optimizer and configuration are read from the checkpoint's metadata; a checkpoint\n"
                "trained in fast mode is evaluated in fast mode with the kernels it recorded. A classifier's\n"
                "evaluation reads the test images only.",
                {},
                {{"classifier", "mlp, lenet and resnet-mini"},
                 {"lm", "gpt-tiny, gpt2-11m, gpt2-98m, gpt2-124m and finetune runs"}}};
  s.opts = {
      path("checkpoint", "", "the checkpoint to evaluate (required)"),
      choice("model", "the checkpoint's", "mlp|lenet|resnet-mini|gpt-tiny|gpt2-11m|gpt2-98m|gpt2-124m",
             "expected model (an error when the checkpoint holds another)"),
      path("data-dir", "SYNOROS_DATA_DIR / SYNOROS_FORTUNES_DIR, else the Debian package's", "where the data set lies"),
      integer_words("test-limit", "0 (all)", 0, kMaxImages, "use only the first N test images", "classifier"),
      text("prompt", "'The '", "prompt of the sample", "lm"),
      integer("sample", 200, 0, 1 << 20, "bytes to sample", "lm"),
      threads_opt(),
      // For checkpoints written before their metadata recorded these: refused when it does.
      text("operator", "the checkpoint's", "resnet-mini's searched operator (older checkpoints)", "classifier"),
      integer_words("mask", "the checkpoint's", 1, 255, "its layer classes (older checkpoints)", "classifier"),
      integer_words("context", "the checkpoint's", 2, 1 << 16, "context length (older checkpoints)", "lm"),
      integer_words("width", "the checkpoint's", 1, 1 << 16, "model width (older checkpoints)", "lm"),
      integer_words("layers", "the checkpoint's", 1, 1024, "transformer blocks (older checkpoints)", "lm"),
      integer_words("heads", "the checkpoint's", 1, 1024, "attention heads (older checkpoints)", "lm"),
  };
  return s;
}

CommandSpec profile_spec() {
  CommandSpec s{"profile", "time every launch of one training step (or an inference pass)", "", {}, {}};
  s.opts = {
      choice("model", "mlp", "mlp|gpt|gpt2-block|mlp-classifier|lenet|resnet-mini",
             "the model (gpt2-block: one block of gpt2-98m, width 768, over a sequence of 512: its part of a "
             "training step)"),
      flag("inference", "the eval-mode forward pass at --batch (classifiers)"),
      integer("batch", 64, 1, 65536, "images per inference pass (with --inference)"),
      integer("iterations", 200, 1, 1'000'000, "timed runs (at most 5 for the larger models, 20 for inference)"),
      path("trace", "", "also write a Chrome trace here"),
      path("describe", "", "also write the plan's description here (classifiers)"),
      path("certificates", "",
           "measure every kernel choice anew (in a temporary tuning cache) and write the selection "
           "certificates here as JSON; prints the roofline model's calibration"),
      text("operator", "", "resnet-mini with a searched operator (an action path), inference"),
      integer("mask", 7, 1, 7, "layer classes that take --operator (bit i: class i of resnet-mini's 3)"),
      threads_opt(),
      fast_opt(),
  };
  return s;
}

CommandSpec trials_spec() {
  CommandSpec s{"trials",
                "operator trials: synthesized operators replace resnet-mini's 3x3 convolutions, each trained "
                "and timed",
                "Under mpirun -np N, rank 0 proposes and ranks, the other ranks train candidates.",
                {},
                {}};
  s.opts = {
      integer("width", 16, 1, 4096, "network width"),
      integer("depth", 6, 1, 16, "most primitives per operator"),
      integer("iterations", 3000, 1, kMaxSteps, "MCTS iterations"),
      integer("screen", 24, 1, 1'000'000, "operators screened by latency"),
      flag("enumerate", "enumerate the space instead of MCTS"),
      integer("candidates", 6, 1, 100'000, "candidates trained per round"),
      integer("rounds", 2, 1, 10'000, "rounds"),
      real("latency-target", "1.5", 1e-6, 1e6, "target speedup"),
      real("latency-weight", "0.1", 0, 1e6, "weight of latency in the reward"),
      integer("workers", 2, 1, 1024, "worker processes"),
      integer("train-images", 4096, 64, kMaxImages, "proxy training images"),
      integer("test-images", 2000, 1, kMaxImages, "proxy test images"),
      integer("epochs", 1, 1, kMaxEpochs, "proxy epochs"),
      real("lr", "0.05", 1e-12, 100, "proxy learning rate"),
      flag("augment", "augment the proxy training"),
      integer("seed", 1, 0, kMax, "seed"),
      path("report", "trials-report", "report directory"),
      flag("inline", "train candidates in this process (no worker processes)"),
      choice("timer", "measured", "measured|cost-model",
             "latency: measured, or a FLOP-and-byte estimate at fixed rates (deterministic; tests, dry runs)"),
      integer_words("threads", "all cores, or SYNOROS_NUM_THREADS", 1, config::kMaxThreads,
                    "threads of the searching process (worker processes train with one thread each)"),
  };
  return s;
}

CommandSpec lm_trials_spec() {
  CommandSpec s{"lm-trials",
                "operator trials on the GPT: synthesized operators replace the blocks' projections (per class), each "
                "proxy-trained on text and timed as a whole training step",
                "The proxy has the 11M configuration's width and heads with fewer blocks and a shorter context.\n"
                "Writes REPORT/report.md, lm_evaluations.jsonl and the front's operators as PyTorch modules.",
                {},
                {}};
  s.opts = {
      integer("depth", 6, 1, 16, "most primitives per operator"),
      integer("screen", 24, 1, 1'000'000, "operators whose projection times are measured"),
      integer("candidates", 4, 1, 100'000, "operators trained"),
      real("step-target", "1.3", 1e-6, 1e6, "target training-step speedup"),
      real("min-params", "0.0625", 0, 1, "fewest weights per class, as a share of the dense projection's"),
      choice("model", "width 384, 6 heads, 2 blocks, context 64", "gpt-tiny|gpt2-11m|gpt2-98m|gpt2-124m",
             "a named configuration as the proxy (the options below override its sizes)"),
      integer_words("width", "384", 8, 1 << 14, "proxy width"),
      integer_words("heads", "6", 1, 1024, "proxy attention heads"),
      integer_words("layers", "2", 1, 1024, "proxy blocks"),
      integer_words("context", "64", 2, 1 << 14, "proxy context"),
      text("operator", "", "no search: train and time the baseline and this operator (an action path of a report)"),
      integer("mask", 15, 1, 15,
              "projection classes that take --operator (bit i: c_attn, attn.c_proj, c_fc, mlp.c_proj)"),
      integer("batch", 16, 1, 1 << 16, "proxy batch"),
      integer("steps", 150, 1, kMaxSteps, "proxy training steps"),
      integer("val-batches", 16, 1, 1 << 20, "validation batches"),
      real("lr", "1e-3", 1e-12, 100, "proxy peak learning rate (AdamW, warmup, cosine)"),
      text("data", "fortunes", "fortunes, or a text file's path"),
      integer("seed", 1, 0, kMax, "seed"),
      path("report", "lm-trials", "report directory"),
      choice("timer", "measured", "measured|cost-model",
             "step and projection times: measured, or a FLOP-and-byte estimate at fixed rates (deterministic)"),
      threads_opt(),
  };
  return s;
}

CommandSpec trials_worker_spec() {
  CommandSpec s{"trials-worker", "one candidate's proxy training, for trials (internal)", "", {}, {}};
  s.hidden = true;
  s.opts = {
      integer("width", 16, 1, 4096, "network width"),
      integer("mask", 7, 0, 255, "layer classes that take the operator"),
      integer("epochs", 1, 1, kMaxEpochs, "proxy epochs"),
      integer("train-images", 4096, 1, kMaxImages, "proxy training images"),
      integer("test-images", 2000, 1, kMaxImages, "proxy test images"),
      real("lr", "0.05", 1e-12, 100, "proxy learning rate"),
      integer("seed", 1, 0, kMax, "seed"),
      path("out", "worker.json", "result file"),
      text("actions", "", "the operator's action path (none: the baseline)"),
      integer("depth", 6, 1, 16, "most primitives"),
      flag("augment", "augment the proxy training"),
  };
  return s;
}

CommandSpec synth_spec() {
  CommandSpec s{"synth", "enumerate, sample or search operators for a layer spec",
                "Give exactly one spec: --conv2d, --conv2d-same, --spec or --spec-file. A spec reads\n"
                "  'input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:2, g=8:3; bind: N=2, C_in=32, ...'\n"
                "--caps overrides the spec's usage caps; docs/synthesis.md compares the space with Syno's",
                {},
                {}};
  s.opts = {
      flag("conv2d", "the built-in conv2d spec (C_in -> C_out)"),
      flag("conv2d-same", "the built-in conv2d spec with C_in = C_out"),
      text("spec", "", "a spec as text"),
      path("spec-file", "", "a spec in a file (clauses per line or ';')"),
      choice("mode", "enumerate", "enumerate|sample|mcts|random|beam|gaps",
             "what to do; gaps: group the canonical operators by the function they compute"),
      integer("depth", 6, 1, 16, "most primitives"),
      integer("limit", 10, 0, 1'000'000, "operators to print"),
      integer("iterations", 2000, 0, kMaxSteps, "MCTS iterations / random samples"),
      integer("width", 8, 1, 1'000'000, "beam width"),
      integer("seed", 1, 0, kMax, "seed"),
      choice("reward", "flops", "flops|hash",
             "flops: FLOPs window against a 3x3 convolution; hash: constant-time pseudo reward"),
      path("checkpoint", "", "MCTS state file: resumed if it exists, saved every 500 iterations"),
      flag("raw", "also count with the canonicalization rules off (enumerate); gaps: check them too"),
      path("export", "", "write each printed operator as a PyTorch module DIR/op<i>.py"),
      integer_words("max-weights", "the synthesizer's", 0, 16, "most weight tensors"),
      integer_words("max-reductions", "4", 0, 64, "most reductions"),
      integer_words("min-weights", "1", 0, 16, "fewest weight tensors"),
      integer_words("max-weight-rank", "4", 1, 16, "most iterators shared into one weight"),
      integer_words("max-vars-in-size", "2", 1, 8, "most variables in a generated size"),
      integer_words("max-exponent", "1", 1, 4, "largest |exponent| of a variable in a generated size"),
      real("min-unfold-ratio", "2", 0, 1e6, "a window's main dim is at least this many windows under every binding"),
      integer_words("max-window", "30", 2, 1 << 20, "largest unfold window"),
      text("caps", "", "usage caps over the spec's, e.g. 'C_out=4, k=2' (primary and coefficient variables)"),
      flag("count-weight-coefficients",
           "sharing an iterator into a weight spends its coefficients' caps too (off: only primary variables, as Syno)"),
      flag("no-shift", "no shift primitives"),
      flag("no-stride", "no stride primitives"),
  };
  return s;
}

CommandSpec generate_spec() {
  CommandSpec s{"generate", "text from a GPT-2 model, streamed as it is decoded, with tokens/s",
                "The model is a safetensors file (Hugging Face's GPT-2 layout, a file written by the library,\n"
                "or a checkpoint of `synoros train --model gpt-tiny`) or a named configuration with random\n"
                "weights (for timing). The prompt is read as bytes; tokens above 255 print as <id>. The same\n"
                "command prints the same text on every rerun and thread count. Rates go to stderr.",
                {},
                {}};
  s.opts = {
      text("model", "gpt-tiny", "a safetensors file, or gpt-tiny|gpt2-11m|gpt2-98m|gpt2-124m"),
      text("prompt", "a newline", "the prompt"),
      integer("tokens", 64, 0, kMaxSteps, "tokens to generate per row"),
      integer("batch", 1, 1, 4096, "rows generated together (row 0 is streamed)"),
      real("temperature", "0.8", 0, 100, "sampling temperature (0: greedy)"),
      integer("top-k", 40, 0, kMax, "sample among the k most likely tokens (0: all)"),
      real("top-p", "0.95", 1e-9, 1, "sample among the most likely tokens reaching this probability"),
      integer("seed", 1, 0, kMax, "sampling seed (row b uses seed + b)"),
      integer("init-seed", 1, 0, kMax, "weights' seed for a named configuration"),
      path("lora", "", "LoRA adapters to apply: an adapter file or directory (finetune's OUT/adapter, or PEFT's)"),
      flag("no-merge", "run the adapters as separate terms instead of merging them into the weights"),
      integer_words("heads", "the file's, else width / 64", 1, 1 << 16, "attention heads of a file without the count"),
      integer_words("profile", "off", 1, 1000, "afterwards, time N runs of the decode step per launch (stderr)"),
      threads_opt(),
  };
  return s;
}

CommandSpec operator_spec(const char* name, const char* summary, std::vector<Opt> extra) {
  CommandSpec s{name, summary, "", {}, {}};
  s.opts = {text("operator", "", "an action path from a trials report (required)"),
            integer("mask", 7, 1, 7, "layer classes that take the operator (bit i: class i of resnet-mini's 3)"),
            integer("width", 16, 1, 4096, "network width")};
  for (Opt& o : extra) s.opts.push_back(std::move(o));
  return s;
}
}  // namespace

void apply_threads(const Args& a) {
  if (a.has("threads")) set_num_threads(int(a.integer("threads")));
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {train_spec(), train_cmd},
      {eval_spec(), eval_cmd},
      {finetune_spec(), finetune_cmd},
      {generate_spec(), generate_cmd},
      {CommandSpec{"train-mlp",
                   "train the tiny MLP on a synthetic regression task and print its loss curve",
                   "",
                   {integer("steps", 500, 1, kMaxSteps, "training steps"),
                    real("lr", "0.05", 1e-12, 100, "learning rate"), threads_opt()},
                   {}},
       train_mlp},
      {CommandSpec{"plan",
                   "print the compiled plan of one tiny-MLP SGD step",
                   "",
                   {flag("no-fusion", "switch fusion off"), flag("no-plan", "switch memory planning off"), fast_opt()},
                   {}},
       print_plan},
      {CommandSpec{"memory", "peak bytes of one GPT training step's plan (JSON); nothing runs",
                   "",
                   {choice("model", "the benchmark GPT (4 layers, width 256, context 128)",
                           "gpt-tiny|gpt2-11m|gpt2-98m|gpt2-124m", "a named configuration instead"),
                    integer_words("context", "128, or the configuration's", 1, 1 << 16, "sequence length"),
                    integer_words("batch", "8, or 1 with --model", 1, 1 << 20, "batch size"),
                    flag("checkpoint-activations", "recompute each block's activations in the backward pass"),
                    choice("optimizer", "none: forward and backward, the gradients as outputs", "adamw|sgd",
                           "the whole step with this optimizer's update (adamw: as synoros train compiles it)"),
                    real("clip", "1 (as synoros train)", 0, 1e12, "gradient clipping norm with --optimizer (0: off)"),
                    integer("largest", 0, 0, 1 << 20, "also list the N largest values alive when the arena peaks")},
                   {}},
       gpt_memory},
      {profile_spec(), profile_model},
      {CommandSpec{"info", "instruction set and thread count in use", "", {threads_opt()}, {}}, info},
      {CommandSpec{"peak",
                   "measured FMA rate and memory bandwidth of one core, and of the engine's threads at once (JSON)",
                   "", {threads_opt()}, {}},
       peak},
      {CommandSpec{"tune", "select and cache kernels for the built-in models and benchmark shapes", "",
                   {threads_opt(), fast_opt()}, {}},
       tune},
      {trials_spec(), trials_cmd},
      {trials_worker_spec(), trials_worker_cmd},
      {lm_trials_spec(), lm_trials_cmd},
      {operator_spec("export", "a searched operator as PyTorch modules, one per replaced layer class",
                     {integer("batch", 64, 1, 1 << 20, "batch size of the example input"),
                      path("out", ".", "output directory"), text("stem", "op", "file name stem")}),
       export_cmd},
      {operator_spec("latency",
                     "a searched operator's network against the convolutional one, timed interleaved (batch 64 "
                     "and 1, 1 and 2 threads)",
                     {integer("rounds", 3, 1, 1000, "rounds"), integer("repeats", 7, 1, 100000, "runs per round"),
                      path("json", "", "also write the results as JSON here"), fast_opt()}),
       latency_cmd},
      {synth_spec(), synth},
  };
  return table;
}

}  // namespace synoros::cli
