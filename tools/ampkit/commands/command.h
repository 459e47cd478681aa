// One file per subcommand of the `ampkit` command line, as accelerate's
// commands/: each add_<name> declares its subcommand and its options on the
// app and returns what runs it; main() only registers them.
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <string>

namespace commands {

// A subcommand and what runs it once it is the one parsed; the run returns
// the exit code.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_report(CLI::App& app);
Command add_doctor(CLI::App& app);
Command add_config(CLI::App& app);  // config, config default, config update
Command add_env(CLI::App& app);
Command add_estimate_memory(CLI::App& app);
Command add_launch(CLI::App& app);
Command add_test(CLI::App& app);
Command add_self_test_worker(CLI::App& app);  // what `ampkit test` launches

// Accepts both --snake_case and --kebab-case, as accelerate's flags do.
std::string flags(const std::string& kebab);

// The one place exceptions become messages: "ampkit <command>: <what>", the
// component prefix dropped where the command already names it, and the
// diag layer's hint where LibTorch's message has one.
void print_error(const std::string& command, const std::exception& e);

// The help of every subcommand's --config_file.
extern const char* const kConfigFileHelp;

}  // namespace commands
