// One candidate: proxy training on Fashion-MNIST and in-engine latency, never fatal.
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "synoros/trials.hpp"
#include "trials/json_fields.hpp"
#include "synoros/train.hpp"

namespace synoros::trials {

std::string serialize_actions(const std::vector<synth::Action>& path) { return synth::encode_actions(path); }

std::vector<synth::Action> parse_actions(const std::string& text) { return synth::decode_actions(text); }

std::string to_json(const Evaluation& e) {
  nlohmann::json j = {{"key", e.key},
                      {"formula", e.formula},
                      {"actions", e.actions},
                      {"failed", e.failed},
                      {"error", e.error},
                      {"class_mask", e.class_mask},
                      {"accuracy", e.accuracy},
                      {"loss", std::isfinite(e.loss) ? e.loss : -1.0},
                      {"trained_epochs", e.trained_epochs},
                      {"latency_ms", {{"b1_t1", e.latency.b1_t1}, {"b64_t1", e.latency.b64_t1},
                                      {"b1_t2", e.latency.b1_t2}, {"b64_t2", e.latency.b64_t2}}},
                      {"paired_base_b64_t1", e.paired_base_b64_t1},
                      {"flops", e.flops},
                      {"params", e.params},
                      {"train_seconds", e.train_seconds},
                      {"reward", e.reward},
                      {"order", e.order}};
  return j.dump();
}

Evaluation evaluation_from_json(const std::string& line) {
  Evaluation e;
  try {
    auto j = nlohmann::json::parse(line);
    e.key = j.at("key");
    e.formula = j.at("formula");
    e.actions = j.at("actions");
    e.failed = j.at("failed");
    e.error = j.at("error");
    e.class_mask = unsigned(integer_field(j, "class_mask", 0, std::numeric_limits<unsigned>::max()));
    e.accuracy = j.at("accuracy");
    e.loss = j.at("loss");
    e.trained_epochs = integer_field(j, "trained_epochs", 0, int64_t(1) << 53);
    auto& l = j.at("latency_ms");
    e.latency = {l.at("b1_t1"), l.at("b64_t1"), l.at("b1_t2"), l.at("b64_t2")};
    e.paired_base_b64_t1 = j.value("paired_base_b64_t1", 0.0);  // absent in older logs
    e.flops = j.at("flops");
    e.params = j.at("params");
    e.train_seconds = j.at("train_seconds");
    e.reward = j.at("reward");
    // A completion index; the log continues from the largest one plus one.
    e.order = integer_field(j, "order", 0, int64_t(1) << 53);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    throw Error(std::string("trials: malformed evaluation record: ") + ex.what());
  }
  return e;
}

namespace {
double network_flops(nn::Module& net) {
  net.eval();
  CompiledStep s = compile([&net](const std::vector<Tensor>& a) { return std::vector<Tensor>{net(a[0])}; },
                           {{DType::F32, {1, 1, 28, 28}}});
  const Graph& g = s.plan().graph();
  double f = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(ValueId(i));
    f += op_info(n.op).cost(g, n).flops;
  }
  return f;
}
}  // namespace

Evaluation evaluate(const synth::Spec& spec, const synth::Operator* op, unsigned mask, const ProxyConfig& cfg) {
  Evaluation e;
  e.key = op ? op->canonical : "baseline";
  e.formula = op ? synth::formula(spec, *op) : "3x3 convolution";
  e.actions = op ? serialize_actions(op->path) : "";
  e.class_mask = op ? mask : 0;
  e.trained_epochs = cfg.epochs;
  try {
    auto net = make_network(spec, op, mask, cfg.seed, cfg.width);
    e.params = double(net->parameter_count());
    e.flops = network_flops(*net);
    train::ClassifierConfig c;
    c.model = "resnet-mini";
    c.epochs = cfg.epochs;
    c.batch = cfg.batch;
    c.lr = cfg.lr;
    c.seed = cfg.seed;
    c.augment = cfg.augment;
    c.train_limit = cfg.train_images;
    c.test_limit = cfg.test_images;
    train::ClassifierTrainer t(c, net);
    auto t0 = std::chrono::steady_clock::now();
    t.train_steps(t.total_steps());
    e.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto [loss, acc] = t.evaluate();
    e.loss = loss;
    e.accuracy = acc;
    if (!std::isfinite(loss)) throw Error("the test loss is not finite");
    e.latency = measure_latency(*net);
  } catch (const std::exception& ex) {
    e.failed = true;
    e.error = ex.what();
  }
  return e;
}

}  // namespace synoros::trials
