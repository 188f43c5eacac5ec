#include "cli/worker_processes.hpp"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace synoros::cli {

using trials::WorkerResult;

std::vector<WorkerResult> run_worker_processes(const std::string& exe,
                                               const std::vector<std::vector<std::string>>& jobs,
                                               int parallel, const std::string& tmp_dir) {
  std::vector<WorkerResult> out(jobs.size());
  std::filesystem::create_directories(tmp_dir);
  std::map<pid_t, size_t> running;
  size_t next = 0;
  auto result_file = [&](size_t i) { return tmp_dir + "/job" + std::to_string(i) + ".json"; };
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && int(running.size()) < std::max(parallel, 1)) {
      std::vector<std::string> args = {exe, "trials-worker"};
      args.insert(args.end(), jobs[next].begin(), jobs[next].end());
      args.insert(args.end(), {"--out", result_file(next)});
      std::remove(result_file(next).c_str());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      // The child's environment is built here: between fork and exec only async-signal-safe calls.
      std::vector<std::string> env_store = {"SYNOROS_NUM_THREADS=1"};
      for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "SYNOROS_NUM_THREADS=", 20) != 0) env_store.push_back(*e);
      std::vector<char*> envp;
      for (auto& e : env_store) envp.push_back(e.data());
      envp.push_back(nullptr);
      pid_t pid = fork();
      if (pid < 0) {
        for (auto& [child, job] : running) waitpid(child, nullptr, 0);  // leave no zombies behind
        throw Error("trials: fork failed");
      }
      if (pid == 0) {
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
      }
      running[pid] = next++;
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) {  // no children left to wait for: whatever did not report has failed
      for (auto& [child, job] : running) out[job].error = "worker process lost (waitpid failed)";
      for (size_t j = next; j < jobs.size(); ++j) out[j].error = "worker process never started";
      break;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    size_t i = it->second;
    running.erase(it);
    WorkerResult& r = out[i];
    r.where = "local";
    std::ifstream f(result_file(i));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && std::getline(f, r.line)) {
      r.ok = true;
    } else {
      r.error = WIFSIGNALED(status)
                    ? "worker killed by signal " + std::to_string(WTERMSIG(status))
                    : "worker exited with status " + std::to_string(WEXITSTATUS(status));
    }
    std::remove(result_file(i).c_str());
  }
  return out;
}

}  // namespace synoros::cli
