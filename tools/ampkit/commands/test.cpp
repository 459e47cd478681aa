// `ampkit test`: checks that distributed training works here, by launching
// this program's hidden `self-test-worker` as the processes.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "ampkit/accelerator/self_test.h"
#include "ampkit/amp/precision.h"
#include "ampkit/config/config.h"
#include "command.h"

namespace commands {
namespace {

struct TestArgs {
  ampkit::SelfTestOptions options;
  std::string config_file;
};

struct SelfTestWorkerArgs {
  std::string precision;
  std::string dir;
  int64_t global_batch = 0;
};

// The config's num_processes where the flag is not given, then the run of
// this program's self-test-worker.
int run_test(TestArgs& args, const CLI::Option& processes) {
  const std::string path = args.config_file.empty()
                               ? ampkit::config::config_path_to_read()
                               : args.config_file;
  if (processes.count() == 0 &&
      (!args.config_file.empty() || std::filesystem::exists(path))) {
    const auto c = ampkit::config::load_config(path);
    if (c.num_processes > 1) {
      args.options.num_processes = c.num_processes;
    }
  }
  args.options.worker_command = {
      std::filesystem::read_symlink("/proc/self/exe").string(),
      "self-test-worker"};
  return ampkit::run_self_test(args.options, std::cout, std::cerr);
}

}  // namespace

Command add_test(CLI::App& app) {
  auto args = std::make_shared<TestArgs>();
  CLI::App* test = app.add_subcommand(
      "test",
      "Check that distributed training works here: a tiny regression model "
      "trained by N processes must reach the weights one process reaches, "
      "in every precision this CPU supports: over NCCL, one GPU each, where "
      "there are N GPUs, else over Gloo on the CPU. Ends with an ok line, "
      "or FAILED and the workers' output.");
  CLI::Option* processes = test->add_option(
      flags("num-processes"),
      args->options.num_processes,
      "processes of the distributed run (default: the config's "
      "num_processes when above 1, else 2)");
  test->add_option(flags("config-file"), args->config_file, kConfigFileHelp);
  test->add_flag(
      "--cpu", args->options.cpu, "check Gloo on the CPU even with GPUs here");
  return {test, [args, processes] {
            try {
              return run_test(*args, *processes);
            } catch (const std::exception& e) {
              print_error("test", e);
              return 1;
            }
          }};
}

// What `ampkit test` launches: hidden from the help.
Command add_self_test_worker(CLI::App& app) {
  auto args = std::make_shared<SelfTestWorkerArgs>();
  CLI::App* worker = app.add_subcommand("self-test-worker", "");
  worker->group("");
  worker->add_option("precision", args->precision)->required();
  worker->add_option("dir", args->dir)->required();
  worker->add_option("global_batch", args->global_batch)->required();
  return {worker, [args] {
            try {
              return ampkit::run_self_test_worker(
                  ampkit::parse_precision(args->precision),
                  args->dir,
                  args->global_batch,
                  std::cerr);
            } catch (const std::exception& e) {
              print_error("test", e);
              return 1;
            }
          }};
}

}  // namespace commands
