// `ampkit config`: writes the config file; `ampkit config default` and
// `ampkit config update`.
#include <CLI/CLI.hpp>

#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

#include "ampkit/amp/capability.h"
#include "ampkit/amp/precision.h"
#include "ampkit/config/config.h"
#include "command.h"

namespace commands {
namespace {

struct ConfigArgs {
  std::string config_file;  // "" = config::default_config_path()
  std::string mixed_precision = "no";

  // Where `ampkit config` writes.
  std::string path() const {
    return config_file.empty() ? ampkit::config::default_config_path()
                               : config_file;
  }
};

// `ampkit config`'s flags, and those of its `default` and `update`.
struct ConfigCommandArgs {
  ConfigArgs config;
  ConfigArgs sub;
};

// `ampkit config`: the questionnaire, saved where asked.
int run_config(const ConfigArgs& args) {
  const ampkit::config::LaunchConfig config =
      ampkit::config::run_questionnaire(std::cin, std::cout);
  const std::string path = args.path();
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration saved at " << path << '\n';
  return 0;
}

// `ampkit config default`: one process on this machine, never over a file.
int run_config_default(const ConfigArgs& args) {
  const std::string path = args.path();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::cerr << "ampkit config default: " << path
              << " already exists and was left unchanged. Edit it, run "
                 "`ampkit config` to answer the questions again, or pass "
                 "--config_file with a new path.\n";
    return 1;
  }
  ampkit::config::LaunchConfig config;
  config.mixed_precision = ampkit::parse_precision(args.mixed_precision);
  config.distributed_type = "NO";
  config.num_processes = 1;
  config.use_cpu = !ampkit::Capabilities::current().cuda_available;
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration saved at " << path << '\n';
  return 0;
}

// `ampkit config update`: an older file rewritten with the current keys.
int run_config_update(const ConfigArgs& args) {
  const std::string path = args.path();
  const ampkit::config::LaunchConfig config = ampkit::config::load_config(path);
  ampkit::config::save_config(config, path);
  std::cout << "ampkit configuration updated at " << path << '\n';
  return 0;
}

}  // namespace

Command add_config(CLI::App& app) {
  auto args = std::make_shared<ConfigCommandArgs>();
  CLI::App* config = app.add_subcommand(
      "config",
      "Write the config file (accelerate's default_config.yaml keys) by "
      "answering accelerate config's questions, one answer per line (answers "
      "can be piped); or `default` / `update` it.");
  config->require_subcommand(0, 1);
  config->add_option(
      flags("config-file"), args->config.config_file, kConfigFileHelp);
  CLI::App* config_default = config->add_subcommand(
      "default",
      "Write a config for one process on this machine (use_cpu when there is "
      "no CUDA GPU). Never overwrites: exits 1 when the file exists.");
  config_default->add_option(
      flags("config-file"), args->sub.config_file, kConfigFileHelp);
  config_default
      ->add_option(
          flags("mixed-precision"),
          args->sub.mixed_precision,
          "no, fp16, bf16 or auto (default: no)")
      ->check(CLI::IsMember({"no", "fp16", "bf16", "auto"}));
  CLI::App* config_update = config->add_subcommand(
      "update",
      "Rewrite an existing config file with the current keys (older "
      "accelerate names such as fp16: true converted), keeping the keys "
      "ampkit does not act on.");
  config_update->add_option(
      flags("config-file"), args->sub.config_file, kConfigFileHelp);
  return {config, [args, config_default, config_update] {
            if (args->sub.config_file.empty()) {
              args->sub.config_file = args->config.config_file;
            }
            try {
              if (config_default->parsed()) {
                return run_config_default(args->sub);
              }
              if (config_update->parsed()) {
                return run_config_update(args->sub);
              }
              return run_config(args->config);
            } catch (const std::exception& e) {
              print_error("config", e);
              return 1;
            }
          }};
}

}  // namespace commands
