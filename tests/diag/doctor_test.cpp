// The doctor's precision recommendation with injected capability data and
// timings, and a real run of every check on this machine.
#include "ampkit/diag/doctor.h"
#include "ampkit/config/config_check.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit::diag {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::with_gpu;

constexpr auto kCPU = c10::DeviceType::CPU;
constexpr auto kCUDA = c10::DeviceType::CUDA;

MatmulTiming timing(c10::DeviceType device, const char* dtype, double gflops) {
  return {device, dtype, gflops, "", 0};
}

Capabilities cpu_with_amx() {
  Capabilities caps;
  caps.torch_major = 2;
  caps.torch_minor = 11;
  caps.cpu.avx512f = true;
  caps.cpu.amx_bf16 = true;
  return caps;
}

const CheckResult* find_check(const DoctorReport& r, const std::string& name) {
  for (const auto& c : r.checks) {
    if (c.name == name) {
      return &c;
    }
  }
  return nullptr;
}

class DoctorRunTest : public ampkit::testing_util::TempDirTest {
 protected:
  DoctorOptions quick(std::optional<std::string> config_file) const {
    DoctorOptions options;
    options.project_dir = fs::temp_directory_path().string();
    options.more_checks.push_back([config_file] {
      return ampkit::config::check_config_file(config_file);
    });
    options.matmul_size = 256;
    options.min_seconds = 0.05;
    return options;
  }
};

TEST(RecommendPrecisionTest, AmxCpuWithFastBf16GetsBf16WithTheRatio) {
  const auto rec = recommend_precision(
      kCPU,
      cpu_with_amx(),
      {timing(kCPU, "fp32", 250), timing(kCPU, "bf16", 2000)});
  EXPECT_EQ(rec.precision, Precision::bf16);
  EXPECT_THAT(
      rec.reason,
      HasSubstr("bf16 matmul 8.0x faster than fp32 (2000 vs 250 GFLOP/s)"));
  EXPECT_THAT(rec.reason, HasSubstr("AMX-BF16"));
}

// Issue 15's EPYC: bf16 matmul 3.8x faster, yet a bf16 training step slower.
// The training probe decides, for doctor as for auto.
TEST(RecommendPrecisionTest, FastBf16MatmulButSlowTrainingGetsNo) {
  Capabilities caps = cpu_with_amx();
  caps.cpu_bf16_training_speedup = 0.8;
  const auto rec = recommend_precision(
      kCPU, caps, {timing(kCPU, "fp32", 108), timing(kCPU, "bf16", 416)});
  EXPECT_EQ(rec.precision, Precision::no);
  EXPECT_EQ(rec.precision, auto_precision(kCPU, caps).precision);
  EXPECT_THAT(rec.reason, HasSubstr("bf16 matmul 3.9x faster than fp32"));
  EXPECT_THAT(rec.reason, HasSubstr("training ops measured only 0.80x"));
  caps.cpu_bf16_training_speedup = 1.4;
  EXPECT_EQ(
      recommend_precision(
          kCPU, caps, {timing(kCPU, "fp32", 108), timing(kCPU, "bf16", 416)})
          .precision,
      Precision::bf16);
}

TEST(
    RecommendPrecisionTest, CpuWithoutNativeBf16AndSlowBf16GetsNoWithTheRatio) {
  Capabilities caps;
  caps.cpu.avx2 = true;
  const auto rec = recommend_precision(
      kCPU, caps, {timing(kCPU, "fp32", 150), timing(kCPU, "bf16", 10)});
  EXPECT_EQ(rec.precision, Precision::no);
  EXPECT_THAT(
      rec.reason,
      HasSubstr("bf16 matmul 15.0x slower than fp32 (10 vs 150 GFLOP/s)"));
  EXPECT_THAT(rec.reason, HasSubstr("no native bf16"));
}

TEST(RecommendPrecisionTest, VoltaGetsFp16AmpereAndHopperGetBf16) {
  EXPECT_EQ(
      recommend_precision(kCUDA, with_gpu(7, 0), {}).precision,
      Precision::fp16);
  EXPECT_EQ(
      recommend_precision(kCUDA, with_gpu(8, 0), {}).precision,
      Precision::bf16);
  const auto hopper = recommend_precision(
      kCUDA,
      with_gpu(9, 0),
      {timing(kCUDA, "fp32", 50000), timing(kCUDA, "bf16", 600000)});
  EXPECT_EQ(hopper.precision, Precision::bf16);
  EXPECT_THAT(hopper.reason, HasSubstr("12.0x faster than fp32"));
  // CPU timings say nothing about the GPU.
  EXPECT_EQ(
      recommend_precision(
          kCUDA,
          with_gpu(8, 0),
          {timing(kCPU, "fp32", 100), timing(kCPU, "bf16", 1)})
          .precision,
      Precision::bf16);
}

TEST(RecommendPrecisionTest, MeasurementSlowerThanFp32OverridesNativeBf16) {
  const auto rec = recommend_precision(
      kCPU,
      cpu_with_amx(),
      {timing(kCPU, "fp32", 300), timing(kCPU, "bf16", 100)});
  EXPECT_EQ(rec.precision, Precision::no);
  EXPECT_THAT(
      rec.reason,
      HasSubstr("bf16 matmul 3.0x slower than fp32 (100 vs 300 GFLOP/s), "
                "although the CPU has native bf16"));
  // Within 10% of fp32 is not a contradiction.
  EXPECT_EQ(
      recommend_precision(
          kCPU,
          cpu_with_amx(),
          {timing(kCPU, "fp32", 300), timing(kCPU, "bf16", 280)})
          .precision,
      Precision::bf16);
}

TEST(RecommendPrecisionTest, ChosenDtypeWhoseMatmulFailsGetsNo) {
  MatmulTiming failed{kCUDA, "fp16", std::nullopt, "unsupported: nope", 0};
  const auto rec = recommend_precision(
      kCUDA, with_gpu(7, 0), {timing(kCUDA, "fp32", 10000), failed});
  EXPECT_EQ(rec.precision, Precision::no);
  EXPECT_THAT(rec.reason, HasSubstr("unsupported: nope"));
}

TEST_F(DoctorRunTest, RunsEveryCheckOnThisMachine) {
  torch::set_num_threads(1);
  ::setenv("AMPKIT_CONFIG_FILE", (dir_ / "absent.yaml").c_str(), 1);
  const DoctorReport report = run_doctor(quick(std::nullopt));
  ::unsetenv("AMPKIT_CONFIG_FILE");
  const std::string table = report.table();
  for (const char* name :
       {"libtorch",
        "blas",
        "threads",
        "cpu",
        "precision (cpu)",
        "gpu",
        "cuda",
        "nccl",
        "config",
        "disk"}) {
    const CheckResult* check = find_check(report, name);
    ASSERT_NE(check, nullptr) << name << "\n" << table;
    EXPECT_THAT(table, HasSubstr(name));
  }
  EXPECT_FALSE(report.blocks_training()) << table;

  const CheckResult* blas = find_check(report, "blas");
  EXPECT_EQ(blas->status, CheckStatus::ok) << table;
  // Debian's LibTorch calls libopenblas0-openmp (setup.sh installs it);
  // PyTorch's wheels link MKL into libtorch_cpu.so.
  EXPECT_THAT(
      blas->value, HasSubstr(TORCH_VERSION_MAJOR >= 2 ? "MKL" : "OpenBLAS"));
  EXPECT_THAT(blas->value, HasSubstr("GFLOP/s"));

  const MatmulTiming* fp32 = nullptr;
  const MatmulTiming* bf16 = nullptr;
  for (const auto& t : report.timings) {
    if (t.device == kCPU && t.dtype == "fp32") {
      fp32 = &t;
    }
    if (t.device == kCPU && t.dtype == "bf16") {
      bf16 = &t;
    }
    if (t.device == kCPU && t.dtype == "fp16" && !t.gflops) {
      EXPECT_THAT(t.note, HasSubstr("unsupported: "));
    }
  }
  ASSERT_NE(fp32, nullptr);
  ASSERT_TRUE(fp32->gflops.has_value()) << fp32->note;
  EXPECT_GT(*fp32->gflops, 0);

  if (std::thread::hardware_concurrency() > 1) {
    const CheckResult* threads = find_check(report, "threads");
    EXPECT_EQ(threads->status, CheckStatus::warn);
    EXPECT_THAT(threads->detail, HasSubstr("torch::set_num_threads("));
  }

  // Whatever this CPU measures, doctor says what `auto` picks here.
  const CheckResult* precision = find_check(report, "precision (cpu)");
  const auto caps = with_cpu_bf16_measurement(Capabilities::current());
  EXPECT_EQ(
      precision->value,
      to_string(auto_precision(c10::DeviceType::CPU, caps).precision))
      << table;
  ASSERT_NE(bf16, nullptr);
  if (bf16->gflops && caps.cpu.native_bf16()) {
    EXPECT_THAT(precision->detail, HasSubstr("training ops measured")) << table;
    EXPECT_THAT(precision->detail, HasSubstr("than fp32 ("))
        << "the matmul ratio: " << table;
  }

  const CheckResult* config = find_check(report, "config");
  EXPECT_EQ(config->status, CheckStatus::ok);
  EXPECT_EQ(config->value, "none (defaults)");
  // The disk check follows the free space of project_dir (the temp
  // directory here), which a busy machine can be short of.
  const auto available = fs::space(fs::temp_directory_path()).available;
  const CheckStatus disk = available >= (uintmax_t(10) << 30) ? CheckStatus::ok
                           : available >= (uintmax_t(1) << 30)
                               ? CheckStatus::warn
                               : CheckStatus::fail;
  EXPECT_EQ(find_check(report, "disk")->status, disk) << table;
}

TEST_F(DoctorRunTest, ConfigWithAnUnknownKeyWarnsAndNamesIt) {
  const std::string path = write(
      "unknown.yaml",
      "compute_environment: LOCAL_MACHINE\nmixed_precision: bf16\n"
      "num_procesess: 2\n");
  const DoctorReport report = run_doctor(quick(path));
  const CheckResult* config = find_check(report, "config");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->status, CheckStatus::warn);
  EXPECT_THAT(config->value, HasSubstr("num_procesess (line 3)"));
  EXPECT_THAT(config->detail, HasSubstr("num_processes"));
  EXPECT_FALSE(report.blocks_training());
}

TEST_F(DoctorRunTest, ConfigWithABadMixedPrecisionFailsAndBlocksTraining) {
  const std::string path =
      write("bad.yaml", "num_processes: 1\nmixed_precision: fp64\n");
  const DoctorReport report = run_doctor(quick(path));
  const CheckResult* config = find_check(report, "config");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->status, CheckStatus::fail);
  EXPECT_THAT(config->value, HasSubstr(path + ":2: "));
  EXPECT_THAT(config->value, HasSubstr("fp64"));
  EXPECT_TRUE(report.blocks_training());
  EXPECT_THAT(report.table(), HasSubstr("FAIL"));
}

TEST_F(DoctorRunTest, ConfigWithASyntaxErrorFailsWithItsLine) {
  const std::string path =
      write("syntax.yaml", "num_processes: 1\nmixed_precision: [bf16\n");
  const DoctorReport report = run_doctor(quick(path));
  const CheckResult* config = find_check(report, "config");
  EXPECT_EQ(config->status, CheckStatus::fail);
  EXPECT_THAT(config->value, HasSubstr(path + ":"));
  EXPECT_THAT(config->value, HasSubstr("YAML syntax error"));
  EXPECT_TRUE(report.blocks_training());
}

TEST_F(DoctorRunTest, ConfigThatIsNotAMappingOrIsMissingFails) {
  const std::string list = write("list.yaml", "- bf16\n- fp16\n");
  EXPECT_EQ(
      find_check(run_doctor(quick(list)), "config")->status, CheckStatus::fail);
  const auto missing = run_doctor(quick((dir_ / "missing.yaml").string()));
  EXPECT_EQ(find_check(missing, "config")->status, CheckStatus::fail);
  EXPECT_THAT(find_check(missing, "config")->value, HasSubstr("not found"));
}

TEST(DoctorOptionsTest, MatmulSizeBelowOneIsRefused) {
  DoctorOptions options;
  options.matmul_size = 0;
  AMPKIT_EXPECT_THROWS_WITH(
      run_doctor(options), InvalidArgument, "matmul_size must be >= 1, got 0");
}

}  // namespace
}  // namespace ampkit::diag
