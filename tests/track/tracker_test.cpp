// The JSONL and CSV trackers, log_with parsing, the progress display, and
// the Accelerator's trackers with automatic logging on a tiny model.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/error.h"
#include "ampkit/track/progress.h"
#include "ampkit/track/tracker.h"
#include "test_util.h"

namespace ampkit::track {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("ampkit_track_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

TEST(TrackerTest, LogWithParsesListsAllAndRejectsUnknownNames) {
  EXPECT_EQ(parse_log_with(""), std::vector<std::string>{});
  EXPECT_EQ(
      parse_log_with("jsonl, tensorboard"),
      (std::vector<std::string>{"jsonl", "tensorboard"}));
  EXPECT_EQ(
      parse_log_with("all"),
      (std::vector<std::string>{"jsonl", "csv", "tensorboard"}));
  EXPECT_EQ(parse_log_with("csv,csv"), std::vector<std::string>{"csv"});
  AMPKIT_EXPECT_THROWS_WITH(
      parse_log_with("jsonl,wandb"),
      InvalidArgument,
      "unknown tracker in log_with, got 'wandb'. Valid values: jsonl, csv, "
      "tensorboard, all");
}

TEST(TrackerTest, JsonlWritesOneObjectPerLogWithConfigBeside) {
  const auto dir = fresh_dir("jsonl");
  auto tracker = make_tracker("jsonl", dir.string(), {{"lr", "0.001"}});
  tracker->log({{"loss", 0.5}, {"lr", 1e-3}}, 1, 100.25);
  tracker->log({{"loss", std::nan("")}}, 2, 101.5);
  tracker->finish();
  const auto lines = lines_of(dir / kJsonlFile);
  ASSERT_EQ(lines.size(), 2u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["step"], 1);
  EXPECT_DOUBLE_EQ(first["wall_time"].get<double>(), 100.25);
  EXPECT_DOUBLE_EQ(first["loss"].get<double>(), 0.5);
  // NaN has no JSON spelling: it is written as null, the line stays valid.
  EXPECT_TRUE(nlohmann::json::parse(lines[1])["loss"].is_null());
  std::ifstream config(dir / kConfigFile);
  EXPECT_EQ(nlohmann::json::parse(config)["lr"], "0.001");
  AMPKIT_EXPECT_THROWS_WITH(
      tracker->log({{"loss", 1}}, 3, 0), UsageError, "log after finish");
  fs::remove_all(dir);
}

TEST(TrackerTest, CsvWritesOneRowPerMetricUnderOneHeader) {
  const auto dir = fresh_dir("csv");
  {
    auto tracker = make_tracker("csv", dir.string(), {});
    tracker->log({{"loss", 0.25}, {"a,b", 2}}, 7, 12.5);
    tracker->finish();
  }
  {
    // A resumed run appends without a second header.
    auto tracker = make_tracker("csv", dir.string(), {});
    tracker->log({{"loss", 0.125}}, 8, 13);
    tracker->finish();
  }
  const auto lines = lines_of(dir / kCsvFile);
  EXPECT_EQ(
      lines,
      (std::vector<std::string>{
          "step,wall_time,name,value",
          "7,12.5,\"a,b\",2",
          "7,12.5,loss,0.25",
          "8,13,loss,0.125"}));
  fs::remove_all(dir);
}

TEST(TrackerTest, UnwritableRunDirectoryNamesThePath) {
  const auto dir = fresh_dir("file");
  fs::create_directories(dir);
  std::ofstream(dir / "plain_file") << "x";
  AMPKIT_EXPECT_THROWS_WITH(
      make_tracker("jsonl", (dir / "plain_file").string(), {}),
      IoError,
      "cannot create the run directory " + (dir / "plain_file").string());
  fs::remove_all(dir);
}

ProgressOptions progress_options(
    double redraws, double interval, int width, bool plain) {
  ProgressOptions o;
  o.max_redraws_per_second = redraws;
  o.line_interval_seconds = interval;
  o.bar_width = width;
  o.plain = plain;
  return o;
}

TEST(ProgressTest, FormatShowsStepEpochLossRateAndEta) {
  std::FILE* sink = std::tmpfile();
  {
    Progress bar(100, progress_options(10, 10, 10, false), sink);
    const std::string text = bar.format({25, 2, 0.3125, 1500});
    EXPECT_THAT(text, testing::StartsWith("epoch 2 [##--------] 25/100 25%"));
    EXPECT_THAT(text, testing::HasSubstr("loss 0.3125 1500 samples/s ETA "));
    Progress plain(100, progress_options(10, 10, 10, true), sink);
    EXPECT_THAT(
        plain.format({25, 2, 0.3125, 1500}),
        testing::StartsWith("epoch 2 25/100 25% loss"));
  }  // both draw their final state into sink before it closes
  std::fclose(sink);
}

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) {
    out += static_cast<char>(c);
  }
  return out;
}

TEST(ProgressTest, PlainModePrintsPeriodicLinesNotEveryUpdate) {
  std::FILE* sink = std::tmpfile();
  {
    Progress progress(1000, progress_options(10, 3600, 30, true), sink);
    for (int64_t step = 1; step <= 1000; ++step) {
      progress.update({step, 1, 0.5, 100});
    }
  }  // the destructor draws the final state
  const std::string out = contents(sink);
  // The first update and the final state; the interval holds back the rest.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_THAT(out, testing::HasSubstr("1000/1000 100%"));
  std::fclose(sink);
}

TEST(ProgressTest, BarRedrawsInPlaceAtMostTheRateLimit) {
  std::FILE* sink = std::tmpfile();
  {
    Progress progress(1000, progress_options(1e-3, 10, 30, false), sink);
    for (int64_t step = 1; step <= 1000; ++step) {
      progress.update({step, 1, 0.5, 100});
    }
    progress.finish();
  }
  const std::string out = contents(sink);
  // One redraw allowed per 1000 s: the first update and finish().
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  std::fclose(sink);
}

TEST(ProgressTest, DisabledProgressDrawsNothing) {
  std::FILE* sink = std::tmpfile();
  {
    ProgressOptions options;
    options.plain = true;
    options.enabled = false;  // a process other than the main one
    Progress progress(10, options, sink);
    for (int64_t step = 1; step <= 10; ++step) {
      progress.update({step, 1, 0.5, 100});
    }
  }
  EXPECT_EQ(contents(sink), "");
  std::fclose(sink);
}

TEST(ProgressTest, RejectsBadArguments) {
  AMPKIT_EXPECT_THROWS_WITH(
      Progress(0), InvalidArgument, "total_steps must be >= 1, got 0");
}

// [B, 4] -> [B, 1]
torch::nn::Linear tiny_model() {
  torch::manual_seed(0);
  return torch::nn::Linear(4, 1);
}

TEST(AcceleratorTrackingTest, AutoLogWritesTheTrainingMetricsEachStep) {
  const auto project = fresh_dir("auto");
  Accelerator accelerator(AcceleratorOptions()
                              .quiet(true)
                              .project_dir(project.string())
                              .log_with("jsonl,csv")
                              .auto_log(true)
                              .loss_scaling(true)
                              .gradient_accumulation_steps(2));
  auto net = tiny_model();
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto dataset =
      torch::data::datasets::TensorDataset(torch::randn({16, 4}))
          .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto [model, optimizer, loader] = accelerator.prepare(
      net,
      sgd,
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(dataset), torch::data::DataLoaderOptions(4)));
  accelerator.init_trackers("run", {{"model", "linear 4->1"}});
  EXPECT_EQ(accelerator.run_dir(), (project / "run").string());
  for (auto& batch : loader) {
    auto scope = accelerator.accumulate(model);
    accelerator.backward(model(batch.data).pow(2).mean());
    accelerator.clip_grad_norm_(net->parameters(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
  }
  accelerator.log({{"eval_loss", 0.5}});
  accelerator.end_training();
  EXPECT_EQ(accelerator.optimizer_steps(), 2);

  const auto lines = lines_of(project / "run" / kJsonlFile);
  ASSERT_EQ(lines.size(), 3u);  // two automatic logs and one explicit
  for (int i = 0; i < 2; ++i) {
    const auto line = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(line["step"], i + 1);
    for (const char* key :
         {kLoss,
          kLearningRate,
          kLossScale,
          kSkippedSteps,
          kGradNorm,
          kSamplesPerSecond,
          kMemoryRssMb}) {
      EXPECT_TRUE(line.contains(key)) << key << " in " << lines[i];
    }
    EXPECT_DOUBLE_EQ(line[kLearningRate].get<double>(), 0.01);
    EXPECT_DOUBLE_EQ(line[kLossScale].get<double>(), 65536.0);
    EXPECT_EQ(line[kSkippedSteps], 0);
  }
  EXPECT_EQ(nlohmann::json::parse(lines[2])["eval_loss"], 0.5);
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 2);
  std::ifstream config_file(project / "run" / kConfigFile);
  const auto config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config["model"], "linear 4->1");
  EXPECT_EQ(config["gradient_accumulation_steps"], "2");
  EXPECT_TRUE(fs::exists(project / "run" / kCsvFile));
  fs::remove_all(project);
}

TEST(AcceleratorTrackingTest, InitTrackersWithoutLogWithExplainsTheFix) {
  Accelerator accelerator(AcceleratorOptions().quiet(true));
  AMPKIT_EXPECT_THROWS_WITH(
      accelerator.init_trackers("run"),
      UsageError,
      "init_trackers needs log_with to name a tracker, got none");
  Accelerator with(AcceleratorOptions().quiet(true).log_with("jsonl"));
  AMPKIT_EXPECT_THROWS_WITH(
      with.init_trackers("a/b"), InvalidArgument, "got 'a/b'");
}

}  // namespace
}  // namespace ampkit::track
