// Tests of `ampkit report`'s library side: reading a run directory back
// (jsonl and csv) and the HTML it renders.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "ampkit/error.h"
#include "ampkit/track/report.h"
#include "ampkit/utils/warnings.h"
#include "test_util.h"

namespace ampkit::track {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

using testing_util::read_file;

// 50 steps of loss, lr, loss_scale (halved at the two skipped steps, 20 and
// 35), cumulative skipped_steps, samples_per_second and memory_rss_mb.
struct SyntheticRun {
  std::string jsonl;
  std::string csv = "step,wall_time,name,value\n";
};

SyntheticRun synthetic_run() {
  SyntheticRun run;
  double scale = 65536;
  int skipped = 0;
  for (int step = 1; step <= 50; ++step) {
    if (step == 20 || step == 35) {
      scale /= 2;
      ++skipped;
    }
    const std::map<std::string, double> metrics = {
        {"loss", 2.0 / step + 0.1},
        {"lr", step <= 10 ? step * 1e-4 : 1e-3},
        {"loss_scale", scale},
        {"skipped_steps", skipped},
        {"samples_per_second", 1000 + step},
        {"memory_rss_mb", 512 + 0.5 * step},
    };
    std::ostringstream line;
    line.precision(17);
    line << "{\"step\":" << step << ",\"wall_time\":" << 1.7e9 + step;
    for (const auto& [name, value] : metrics) {
      line << ",\"" << name << "\":" << value;
      std::ostringstream row;
      row.precision(17);
      row << step << ',' << 1.7e9 + step << ',' << name << ',' << value << '\n';
      run.csv += row.str();
    }
    run.jsonl += line.str() + "}\n";
  }
  return run;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ampkit_report_test_" + std::string(info->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_file(
        dir_ / kConfigFile,
        "{\"mixed_precision\": \"bf16\", \"note\": "
        "\"<script>alert('x')</script> & more\"}");
  }
  void TearDown() override {
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(ReportTest, RendersEveryPlotWithTwoSkippedStepMarkers) {
  write_file(dir_ / kJsonlFile, synthetic_run().jsonl);
  const RunData run = read_run(dir_.string());
  ASSERT_EQ(run.series.at("loss").size(), 50u);
  const std::string html = render_report(run, "synthetic");

  for (const char* id :
       {"plot-loss",
        "plot-lr",
        "plot-loss_scale",
        "plot-samples_per_second",
        "plot-memory",
        "plot-skipped_steps"}) {
    EXPECT_EQ(count(html, "<svg id=\"" + std::string(id) + "\""), 1u) << id;
  }
  EXPECT_EQ(count(html, "class=\"skip-marker\""), 2u);
  EXPECT_THAT(html, HasSubstr(">skipped step</text>"));
  EXPECT_THAT(html, HasSubstr(">process RSS (memory_rss_mb)</text>"));
  EXPECT_THAT(html, HasSubstr("Throughput (samples/s)"));
  // Round ticks: the x axis of 1..50 is labelled 0, 10, ... 50.
  EXPECT_THAT(html, HasSubstr(">50</text>"));
}

TEST_F(ReportTest, EscapesConfigurationAndLoadsNothingFromOutside) {
  write_file(dir_ / kJsonlFile, synthetic_run().jsonl);
  const std::string html = render_report(read_run(dir_.string()), "a<b>");
  EXPECT_THAT(
      html,
      HasSubstr("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"));
  EXPECT_THAT(html, HasSubstr("<h1>a&lt;b&gt;</h1>"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("<img")));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
}

TEST_F(ReportTest, ShowsUnloggedPlotsAsNotes) {
  write_file(dir_ / kJsonlFile, "{\"step\":1,\"wall_time\":0,\"loss\":1.5}\n");
  const std::string html = render_report(read_run(dir_.string()), "one");
  for (const char* id :
       {"plot-lr",
        "plot-loss_scale",
        "plot-samples_per_second",
        "plot-memory"}) {
    EXPECT_THAT(
        html,
        HasSubstr(
            "<svg id=\"" + std::string(id) +
            "\" class=\"chart "
            "not-logged\""));
  }
  EXPECT_THAT(html, HasSubstr("Learning rate (lr): not logged in this run"));
  // A single point is drawn as a dot, with ticks around it.
  EXPECT_THAT(html, HasSubstr("<svg id=\"plot-loss\" class=\"chart\""));
  EXPECT_THAT(html, HasSubstr("<circle class=\"point s0\""));
  EXPECT_THAT(html, HasSubstr("loss: a single point, at step 1"));
}

TEST_F(ReportTest, SkipsNonFiniteValuesAndSaysHowMany) {
  write_file(
      dir_ / kJsonlFile,
      "{\"step\":1,\"loss\":1.0}\n"
      "{\"step\":2,\"loss\":null}\n"
      "{\"step\":3,\"loss\":NaN}\n"
      "{\"step\":4,\"loss\":-Infinity,\"lr\":\"inf\"}\n"
      "{\"step\":5,\"loss\":0.5}\n");
  const RunData run = read_run(dir_.string());
  ASSERT_EQ(run.series.at("loss").size(), 5u);
  EXPECT_TRUE(std::isnan(run.series.at("loss")[1].second));
  EXPECT_TRUE(std::isinf(run.series.at("loss")[3].second));
  const std::string html = render_report(run, "nan");
  EXPECT_THAT(html, HasSubstr("loss: 3 non-finite values (NaN/inf) skipped"));
  EXPECT_THAT(html, Not(HasSubstr("nan,")));
  EXPECT_THAT(
      html,
      HasSubstr("Learning rate (lr): no finite values, 1 non-finite (NaN/inf) "
                "skipped"));
}

TEST_F(ReportTest, ReadsCsvAsTheSameSeriesAsJsonl) {
  const SyntheticRun synthetic = synthetic_run();
  write_file(dir_ / kJsonlFile, synthetic.jsonl);
  const RunData from_jsonl = read_run(dir_.string());
  fs::remove(dir_ / kJsonlFile);
  write_file(dir_ / kCsvFile, synthetic.csv);
  const RunData from_csv = read_run(dir_.string());
  EXPECT_EQ(from_csv.series, from_jsonl.series);
  EXPECT_EQ(from_csv.config, from_jsonl.config);
  EXPECT_EQ(from_csv.series.size(), 6u);
}

TEST_F(ReportTest, ReadsQuotedCsvNamesAndNonFiniteValues) {
  write_file(
      dir_ / kCsvFile,
      "step,wall_time,name,value\n"
      "1,0,\"val,\"\"top1\"\"\",0.5\n"
      "2,0,loss,nan\n"
      "3,0,loss,-inf\n");
  const RunData run = read_run(dir_.string());
  EXPECT_EQ(run.series.at("val,\"top1\"").at(0).second, 0.5);
  EXPECT_TRUE(std::isnan(run.series.at("loss").at(0).second));
  EXPECT_TRUE(std::isinf(run.series.at("loss").at(1).second));
}

TEST_F(ReportTest, NamesFileAndLineOfAMalformedJsonlLine) {
  write_file(
      dir_ / kJsonlFile,
      "{\"step\":1,\"loss\":1.0}\n\n{\"step\":3,\"loss\":\n");
  const std::string where = (dir_ / kJsonlFile).string() + ":3: ";
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()), IoError, where + "line is not valid JSON");
  write_file(dir_ / kJsonlFile, "{\"loss\":1.0}\n");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()),
      IoError,
      (dir_ / kJsonlFile).string() + ":1: line has no integer \"step\"");
  write_file(dir_ / kJsonlFile, "{\"step\":1,\"loss\":\"low\"}\n");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()),
      IoError,
      ":1: value of \"loss\" is not a number, got \"low\"");
}

// A run killed (or out of disk) while writing leaves its last line without
// a newline: skipped with a note, the rest read. A broken line that ends in
// a newline is still an error.
TEST_F(ReportTest, SkipsALastLineCutShortWithANote) {
  std::vector<std::string> warnings;
  auto previous = set_warning_handler(
      [&](const Warning& w) { warnings.push_back(w.message); });
  write_file(
      dir_ / kJsonlFile,
      "{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":0.5}\n{\"step\":3,\"lo");
  const RunData jsonl = read_run(dir_.string());
  EXPECT_EQ(jsonl.series.at("loss").size(), 2u);
  fs::remove(dir_ / kJsonlFile);
  write_file(
      dir_ / kCsvFile, "step,wall_time,name,value\n1,0,loss,0.5\n2,0,lo");
  const RunData csv = read_run(dir_.string());
  EXPECT_EQ(csv.series.at("loss").size(), 1u);
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(
      warnings[0],
      HasSubstr(
          (dir_ / kJsonlFile).string() + ":3: the last line is cut short"));
  EXPECT_THAT(warnings[1], HasSubstr(":3: the last line is cut short"));
  write_file(
      dir_ / kCsvFile, "step,wall_time,name,value\n1,0,lo\n2,0,loss,1\n");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()), IoError, ":2: row has 3 fields instead of 4");
}

TEST_F(ReportTest, NamesFileAndLineOfAMalformedCsvRow) {
  write_file(dir_ / kCsvFile, "step,wall_time,name,value\n1,0,loss,0.5\n2,0\n");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()),
      IoError,
      (dir_ / kCsvFile).string() + ":3: row has 2 fields instead of 4");
  write_file(dir_ / kCsvFile, "name,value\n");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()), IoError, ":1: header is not");
}

TEST_F(ReportTest, SaysWhatItExpectedWhenMetricsAreMissing) {
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()),
      IoError,
      "Report: no metrics file in the run directory, got '" + dir_.string() +
          "'. Expected metrics.jsonl or metrics.csv there");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run((dir_ / "missing").string()),
      IoError,
      "Report: run directory not found, got '");
}

TEST_F(ReportTest, RejectsAConfigThatIsNotAnObject) {
  write_file(dir_ / kJsonlFile, "{\"step\":1,\"loss\":1.0}\n");
  write_file(dir_ / kConfigFile, "[1, 2]");
  AMPKIT_EXPECT_THROWS_WITH(
      read_run(dir_.string()), IoError, "config is not a JSON object");
}

TEST_F(ReportTest, WritesReportHtmlIntoTheRunDirectoryByDefault) {
  write_file(dir_ / kJsonlFile, synthetic_run().jsonl);
  write_report(dir_.string());
  const std::string html = read_file(dir_ / "report.html");
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<h1>" + dir_.filename().string() + "</h1>"));
  EXPECT_FALSE(fs::exists(dir_ / "report.html.tmp"));
  EXPECT_EQ(
      default_report_path(dir_.string()), (dir_ / "report.html").string());

  const fs::path other = dir_ / "other.html";
  write_report(dir_.string(), other.string());
  EXPECT_EQ(read_file(other), html);
  AMPKIT_EXPECT_THROWS_WITH(
      write_report(dir_.string(), (dir_ / "no" / "such" / "r.html").string()),
      IoError,
      "r.html: the folder does not exist");
}

TEST_F(ReportTest, ThinsLongSeriesButKeepsTheirSpikes) {
  std::string jsonl;
  for (int step = 0; step < 100000; ++step) {
    const double loss = step == 54321 ? 100.0 : 1.0;
    jsonl += "{\"step\":" + std::to_string(step) +
             ",\"loss\":" + std::to_string(loss) + "}\n";
  }
  write_file(dir_ / kJsonlFile, jsonl);
  const std::string html = render_report(read_run(dir_.string()), "long");
  EXPECT_LT(html.size(), 200000u);
  EXPECT_THAT(html, HasSubstr("loss: 100000 points drawn as per-interval"));
  // The spike sets the y axis: its top tick is 100.
  EXPECT_THAT(html, HasSubstr(">100</text>"));
}

}  // namespace
}  // namespace ampkit::track
