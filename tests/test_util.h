// Helpers shared by ampkit's GoogleTest suites.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "ampkit/amp/capability.h"

// Expects `statement` to throw `exception_type` whose what() contains
// `substring`; any other exception fails the test with its message.
// A GPU test's guard: skips where LibTorch sees no CUDA device, and fails
// instead when AMPKIT_REQUIRE_GPU=1 (scripts/gpu_check/run.sh sets it), so
// a GPU machine whose GPU the C++ side cannot see reads as failed, not as
// passed.
#define AMPKIT_REQUIRE_CUDA()                                            \
  if (!torch::cuda::is_available()) {                                    \
    const char* required = std::getenv("AMPKIT_REQUIRE_GPU");            \
    if (required != nullptr && std::string(required) == "1") {           \
      FAIL() << "AMPKIT_REQUIRE_GPU=1 but LibTorch sees no CUDA device"; \
    }                                                                    \
    GTEST_SKIP() << "LibTorch sees no CUDA device";                      \
  }

#define AMPKIT_EXPECT_THROWS_WITH(statement, exception_type, substring)    \
  do {                                                                     \
    try {                                                                  \
      statement;                                                           \
      ADD_FAILURE() << "expected " #exception_type " from " #statement;    \
    } catch (const exception_type& e) {                                    \
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(substring)); \
    }                                                                      \
  } while (0)

namespace ampkit::testing_util {

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(
      std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A machine with one CUDA GPU of compute capability major.minor, for the
// precision rules; the CPU has no reduced-precision extensions.
inline Capabilities with_gpu(
    int major, int minor, int torch_major = 2, int torch_minor = 11) {
  Capabilities caps;
  caps.torch_major = torch_major;
  caps.torch_minor = torch_minor;
  caps.cuda_available = true;
  CudaDeviceCapability dev;
  dev.index = 0;
  dev.name = "Test GPU";
  dev.major = major;
  dev.minor = minor;
  caps.cuda_devices.push_back(dev);
  return caps;
}

// A fixture with a fresh folder under the system temp dir, named after the
// test and the process, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("ampkit-" + std::string(info->test_suite_name()) + "-" +
            info->name() + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
  }
  /// Writes `text` to dir_/name and returns the path.
  std::string write(const std::string& name, const std::string& text) const {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

}  // namespace ampkit::testing_util
