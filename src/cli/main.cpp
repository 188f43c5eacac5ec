// The synoros command-line tool. Exit status: 0 success, 1 failure (one line on stderr naming the
// cause), 2 a mistake in how the command was called. No input makes it die by a signal.
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <system_error>

#include "cli/commands.hpp"
#include "synoros/runtime.hpp"
#include "synoros/config.hpp"

namespace {
using synoros::cli::Command;
using synoros::cli::commands;

void usage(std::ostream& o) {
  o << "usage: synoros <command> [options]      synoros <command> --help for its options\n\ncommands:\n";
  for (const Command& c : commands()) {
    if (c.spec.hidden) continue;
    std::string name = "  " + c.spec.name;
    o << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << c.spec.summary << "\n";
  }
  o << "  help        this list; help CMD: a command's options; help env: the environment variables\n";
}

const Command* find(const std::string& name) {
  for (const Command& c : commands())
    if (c.spec.name == name) return &c;
  return nullptr;
}

int help(int argc, char** argv) {
  if (argc == 0) {
    usage(std::cout);
    return 0;
  }
  std::string what = argv[0];
  if (what == "env" || what == "environment") {
    std::cout << "environment variables (read once at start; a bad value is an error):\n"
              << synoros::config::describe_variables();
    return 0;
  }
  if (const Command* c = find(what)) {
    std::cout << synoros::cli::help_text(c->spec);
    return 0;
  }
  std::cerr << "synoros help: unknown command '" << what << "'\n";
  usage(std::cerr);
  return 2;
}

int dispatch(int argc, char** argv) {
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") return help(argc - 2, argv + 2);
  const Command* c = find(cmd);
  if (!c) {
    std::cerr << "synoros: unknown command '" << cmd << "'\n";
    usage(std::cerr);
    return 2;
  }
  if (synoros::cli::wants_help(c->spec, argc - 2, argv + 2)) {  // help never does work
    std::cout << synoros::cli::help_text(c->spec);
    return 0;
  }
  synoros::config::check_environment();  // a bad SYNOROS_* value stops here, before any work
  synoros::cli::Args args(c->spec, argc - 2, argv + 2);
  // SYNOROS_STRICT=1 keeps the canonical kernels even against --fast.
  if (args.has("fast") && !synoros::config::flag("SYNOROS_STRICT")) synoros::set_fast_mode(true);
  return c->run(args);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  int rc = 1;
  try {
    rc = dispatch(argc, argv);
  } catch (const synoros::cli::UsageError& e) {
    std::cerr << "synoros: error: " << e.what() << "\n";
    rc = 2;
  } catch (const synoros::Error& e) {
    std::cerr << "synoros: error: " << e.what() << "\n";
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "synoros: error: " << e.code().message() << ": " << e.path1().string() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "synoros: error: out of memory\n";
  } catch (const std::system_error& e) {
    std::cerr << "synoros: error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "synoros: error: " << e.what() << "\n";
  }
  // A run directory the failed command made and left empty goes again (not under mpirun, whose
  // abort ends every rank at once).
  if (rc != 0) synoros::cli::remove_empty_created_dirs();
  return rc;
}
