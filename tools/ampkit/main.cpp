// The `ampkit` command line: `ampkit report RUN_DIR` renders a run directory's
// metrics as a self-contained HTML file; `ampkit doctor` checks this machine;
// `ampkit config` writes the config file; `ampkit env` prints a bug report;
// `ampkit launch` runs a distributed program; `ampkit test` checks that
// distributed training works here; `ampkit estimate-memory` sizes a model.
// Each subcommand is a file of commands/; this one only registers them.
#include <CLI/CLI.hpp>

#include <vector>

#include "ampkit/version.h"
#include "commands/command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ampkit: mixed-precision and data-parallel training for LibTorch.",
      "ampkit"};
  app.set_version_flag("--version", AMPKIT_VERSION);
  app.require_subcommand(1);

  // In this order in the help.
  const std::vector<commands::Command> all = {
      commands::add_report(app),
      commands::add_doctor(app),
      commands::add_config(app),
      commands::add_env(app),
      commands::add_estimate_memory(app),
      commands::add_launch(app),
      commands::add_test(app),
      commands::add_self_test_worker(app)};

  CLI11_PARSE(app, argc, argv);
  for (const commands::Command& command : all) {
    if (command.app->parsed()) {
      return command.run();
    }
  }
  return 0;
}
