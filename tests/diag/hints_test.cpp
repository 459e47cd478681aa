// Tests of the error hints: each LibTorch/c10d error is provoked for real,
// then rethrown through rethrow_with_hint, which must keep the original
// message and type and add exactly one hint.
#include "ampkit/diag/hints.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <typeindex>

#include "ampkit/amp/grad_scaler.h"
#include "ampkit/error.h"
#include "ampkit/utils/memory.h"
#include "test_util.h"

namespace ampkit::diag {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// What a provoked exception looked like when it was caught.
struct Caught {
  bool thrown = false;
  std::type_index type = typeid(void);
  std::string message;  // without c10's backtrace
  bool out_of_memory = false;
};

std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

Caught capture(const std::function<void()>& fn) {
  Caught caught;
  try {
    fn();
  } catch (const std::exception& e) {
    caught.thrown = true;
    caught.type = typeid(e);
    caught.message = message_of(e);
    caught.out_of_memory = is_out_of_memory(e);
  }
  return caught;
}

// `fn` as a user would wrap it: catch everything, rethrow with the hint.
std::function<void()> hinted(std::function<void()> fn) {
  return [fn] {
    try {
      fn();
    } catch (...) {
      rethrow_with_hint();
    }
  };
}

size_t count_of(const std::string& text, std::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// Provokes `fn` plain and hinted (once and twice over) and checks the
// original message survives, the type is kept, the hint holds `hint_text`
// and is added once only. Returns the plain exception for further checks.
Caught expect_hint(
    const std::function<void()>& fn,
    const std::string& original_text,
    const std::string& hint_text) {
  const Caught plain = capture(fn);
  EXPECT_TRUE(plain.thrown);
  EXPECT_THAT(plain.message, HasSubstr(original_text));
  EXPECT_THAT(plain.message, Not(HasSubstr("ampkit hint:")));

  const Caught once = capture(hinted(fn));
  EXPECT_TRUE(once.thrown);
  EXPECT_EQ(once.type, plain.type) << once.type.name();
  EXPECT_THAT(once.message, HasSubstr(plain.message));
  EXPECT_THAT(once.message, HasSubstr("ampkit hint: "));
  EXPECT_THAT(once.message, HasSubstr(hint_text));
  EXPECT_EQ(once.out_of_memory, plain.out_of_memory);

  const Caught twice = capture(hinted(hinted(fn)));
  EXPECT_EQ(twice.type, plain.type);
  EXPECT_EQ(twice.message, once.message);
  EXPECT_EQ(count_of(twice.message, "ampkit hint:"), 1u);
  return plain;
}

// LibTorch's own words for mm on mixed dtypes, which 2.x changed.
#if TORCH_VERSION_MAJOR >= 2
constexpr const char* kMmFloatThenBf16 =
    "expected m1 and m2 to have the same dtype, but got: float != "
    "c10::BFloat16";
constexpr const char* kMmBf16ThenFloat =
    "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != "
    "float";
#else
constexpr const char* kMmFloatThenBf16 =
    "expected scalar type Float but found BFloat16";
constexpr const char* kMmBf16ThenFloat =
    "expected scalar type BFloat16 but found Float";
#endif

TEST(HintsTest, DtypeMismatchOutsideAutocastSaysToUseAutocast) {
  auto fn = [] {
    torch::mm(torch::ones({2, 2}), torch::ones({2, 2}, torch::kBFloat16));
  };
  const Caught plain =
      expect_hint(fn, kMmFloatThenBf16, "accelerator.autocast()");
  EXPECT_EQ(plain.type, std::type_index(typeid(c10::Error)));
  EXPECT_THAT(capture(hinted(fn)).message, HasSubstr(".to(torch::kFloat)"));
}

TEST(HintsTest, DtypeMismatchTheOtherWayAroundGetsTheSameHint) {
  expect_hint(
      [] {
        torch::mm(torch::ones({2, 2}, torch::kBFloat16), torch::ones({2, 2}));
      },
      kMmBf16ThenFloat,
      "prepared models return fp32 outputs");
}

TEST(HintsTest, LinearOnBf16InputWithFp32WeightsGetsTheDtypeHint) {
  torch::nn::Linear linear(2, 2);
  expect_hint(
      [&] {
        linear->forward(torch::ones({2, 2}, torch::kBFloat16));
      },
      "mat1 and mat2 must have the same dtype",
      "outside autocast");
}

// rrelu in training has a bf16 CPU kernel and no fp16 one in 1.13 and 2.11
// alike (1.13 also lacks fp16 matmul on the CPU; 2.x has it).
TEST(HintsTest, MissingHalfKernelOnCpuSaysToUseBf16) {
  const Caught plain = expect_hint(
      [] {
        torch::rrelu(
            torch::ones({4}, torch::kHalf), 0.125, 1.0 / 3, /*training=*/true);
      },
      "not implemented for 'Half'",
      "Use mixed_precision bf16 on the CPU");
  // 2.x throws c10::NotImplementedError here, 1.13 a plain c10::Error;
  // expect_hint checked that the hint keeps whichever it was.
  EXPECT_TRUE(
      plain.type == std::type_index(typeid(c10::Error)) ||
      plain.type == std::type_index(typeid(c10::NotImplementedError)))
      << plain.type.name();
}

TEST(HintsTest, CpuOutOfMemoryStaysDetectableAndSuggestsSmallerBatches) {
  const Caught plain = expect_hint(
      [] { torch::empty({1LL << 46}); },
      "DefaultCPUAllocator: can't allocate memory",
      "ampkit::find_executable_batch_size");
  EXPECT_TRUE(plain.out_of_memory);
  EXPECT_EQ(plain.type, std::type_index(typeid(c10::Error)));
  EXPECT_THAT(
      capture(hinted([] { torch::empty({1LL << 46}); })).message,
      HasSubstr("gradient_accumulation_steps"));
}

TEST(HintsTest, FindExecutableBatchSizeStillRetriesHintedOutOfMemory) {
  const int64_t fits = find_executable_batch_size(
      [](int64_t batch_size) {
        try {
          if (batch_size > 50) {
            torch::empty({1LL << 46});
          }
          return batch_size;
        } catch (...) {
          rethrow_with_hint();
        }
      },
      128);
  EXPECT_EQ(fits, 46);  // 128, 115, 103, 92, 82, 73, 65, 58, 52, 46
}

TEST(HintsTest, OutOfMemoryErrorKeepsItsSubclass) {
  auto fn = [] {
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2 GiB");
  };
  try {
    hinted(fn)();
    ADD_FAILURE() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_THAT(
        std::string(e.what_without_backtrace()),
        HasSubstr("CUDA out of memory. Tried to allocate 2 GiB"));
    EXPECT_THAT(
        std::string(e.what_without_backtrace()),
        HasSubstr("ampkit hint: the process ran out of memory"));
    EXPECT_TRUE(is_out_of_memory(e));
  }
}

TEST(HintsTest, GradScalerFp16GradientsSaysToKeepParametersFp32) {
  auto p = torch::ones({2}, torch::kHalf).requires_grad_();
  p.mutable_grad() = torch::ones({2}, torch::kHalf);
  torch::optim::SGD opt({p}, 0.1);
  GradScaler scaler;
  scaler.scale(torch::tensor(1.0f));
  auto fn = [&] { scaler.unscale_(opt); };
  const Caught plain = expect_hint(
      fn,
      "GradScaler: Attempting to unscale FP16 gradients",
      "do not call model->to(torch::kHalf)");
  EXPECT_EQ(plain.type, std::type_index(typeid(InvalidArgument)));
  try {
    hinted(fn)();
    ADD_FAILURE() << "expected ampkit::InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.component(), "GradScaler");
    EXPECT_THAT(std::string(e.what()), StartsWith("GradScaler: Attempting"));
  }
}

// A port on 127.0.0.1 that refuses connections for as long as the returned
// socket lives: bound, so nobody else gets it, but never listening.
int closed_port_socket(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

TEST(HintsTest, TcpStoreThatCannotConnectSaysToCheckMasterAddrAndPort) {
  uint16_t port = 0;
  const int fd = closed_port_socket(port);
  ASSERT_GE(fd, 0);
  auto fn = [port] {
    c10d::TCPStoreOptions options;
    options.port = port;
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = std::chrono::milliseconds(1000);
    c10d::TCPStore store("127.0.0.1", options);
  };
  const auto start = std::chrono::steady_clock::now();
  expect_hint(
      fn, "127.0.0.1, " + std::to_string(port), "MASTER_ADDR and MASTER_PORT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_THAT(
      capture(hinted(fn)).message, HasSubstr("and that rank 0 started"));
  ::close(fd);
}

// Two Gloo members of one group, one per thread, over a FileStore; rank 0
// all-reduces alone, so its collective times out. LibTorch 1.13's Gloo
// times out after the group's timeout (it ignores AllreduceOptions'), and
// after that the pair is closed, so each provoked error is captured once
// and replayed.
TEST(HintsTest, GlooCollectiveTimeoutSaysARankDiedOrDiverged) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ampkit_hints_gloo_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "store").string();
  constexpr auto kTimeout = std::chrono::milliseconds(1000);

  c10::intrusive_ptr<c10d::ProcessGroupGloo> members[2];
  std::string errors[2];
  std::thread threads[2];
  for (int rank = 0; rank < 2; ++rank) {
    threads[rank] = std::thread([&, rank] {
      try {
        auto store = c10::make_intrusive<c10d::FileStore>(path, 2);
        auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
        options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        members[rank] = c10::make_intrusive<c10d::ProcessGroupGloo>(
            store, rank, 2, options);
      } catch (const std::exception& e) {
        errors[rank] = std::string("construction failed: ") + e.what();
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  ASSERT_TRUE(errors[0].empty()) << errors[0];
  ASSERT_TRUE(errors[1].empty()) << errors[1];

  auto lone_allreduce = [&]() -> std::exception_ptr {
    try {
      std::vector<at::Tensor> tensors{torch::ones({4})};
      c10d::AllreduceOptions options;
      options.timeout = kTimeout;
      auto work = members[0]->allreduce(tensors, options);
      work->wait(std::chrono::milliseconds(30000));
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  };
  const auto start = std::chrono::steady_clock::now();
  const std::exception_ptr timeout = lone_allreduce();
  const std::exception_ptr closed = lone_allreduce();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  ASSERT_TRUE(timeout);
  ASSERT_TRUE(closed);

  auto replay = [](std::exception_ptr e) {
    return [e] { std::rethrow_exception(e); };
  };
  const Caught plain = expect_hint(
      replay(timeout),
      "Timed out waiting 1000ms for recv operation to complete",
      "AMPKIT_DEBUG=1");
  EXPECT_THAT(
      capture(hinted(replay(timeout))).message,
      HasSubstr("a rank died, is stuck, or took a different code path"));
  const Caught after = expect_hint(
      replay(closed),
      "Application timeout caused pair closure",
      "compares shapes before each collective");
  std::cout << "Gloo's messages: " << plain.message << " | " << after.message
            << " (" << plain.type.name() << ")\n";

  members[0].reset();
  members[1].reset();
  std::filesystem::remove_all(dir);
}

TEST(HintsTest, UnknownMessagesAreRethrownUnchanged) {
  auto view = [] { torch::ones({2}).view({3}); };
  const Caught plain = capture(view);
  const Caught again = capture(hinted(view));
  EXPECT_EQ(again.type, plain.type);
  EXPECT_EQ(again.message, plain.message);
  EXPECT_THAT(again.message, Not(HasSubstr("ampkit hint:")));

  AMPKIT_EXPECT_THROWS_WITH(
      hinted([] { throw std::runtime_error("something else"); })(),
      std::runtime_error,
      "something else");
  const Caught runtime =
      capture(hinted([] { throw std::runtime_error("something else"); }));
  EXPECT_EQ(runtime.message, "something else");
  EXPECT_EQ(runtime.type, std::type_index(typeid(std::runtime_error)));
}

TEST(HintsTest, PlainRuntimeErrorsGetTheHintAndStayRuntimeErrors) {
  const Caught caught =
      capture(hinted([] { throw std::runtime_error("Connection refused"); }));
  EXPECT_EQ(caught.type, std::type_index(typeid(std::runtime_error)));
  EXPECT_THAT(caught.message, StartsWith("Connection refused\nampkit hint:"));
}

TEST(HintsTest, OtherExceptionTypesAreRethrownUnchangedEvenWhenTheyMatch) {
  const Caught caught =
      capture(hinted([] { throw std::logic_error("Connection refused"); }));
  EXPECT_EQ(caught.type, std::type_index(typeid(std::logic_error)));
  EXPECT_EQ(caught.message, "Connection refused");
  EXPECT_THROW(hinted([] { throw 42; })(), int);
}

TEST(HintsTest, RethrowOutsideACatchBlockIsAUsageError) {
  AMPKIT_EXPECT_THROWS_WITH(
      rethrow_with_hint(), UsageError, "no exception is being handled");
}

TEST(HintsTest, HintForKnowsEachPatternAndNothingElse) {
  EXPECT_THAT(
      hint_for("Expected all tensors to be on the same device, but found at "
               "least two devices, cuda:0 and cpu!")
          .value_or(""),
      HasSubstr(".to(accelerator.device())"));
  EXPECT_THAT(
      hint_for("expected scalar type Float but found Half").value_or(""),
      HasSubstr("accelerator.autocast()"));
  EXPECT_THAT(
      hint_for("CUDA out of memory. Tried to allocate 20.00 MiB").value_or(""),
      HasSubstr("gradient_accumulation_steps"));
  EXPECT_THAT(
      hint_for("Socket Timeout").value_or(""), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(
      hint_for("Connection reset by peer").value_or(""),
      HasSubstr("MASTER_ADDR"));
  EXPECT_THAT(
      hint_for("Watchdog caught collective operation timeout: WorkNCCL(...)")
          .value_or(""),
      HasSubstr("AMPKIT_DEBUG=1"));
  EXPECT_EQ(
      hint_for("shape '[3]' is invalid for input of size 2"), std::nullopt);
  EXPECT_EQ(hint_for(""), std::nullopt);
}

TEST(HintsTest, VersionMismatchSaysToRebuildOrRunTheBuiltVersion) {
  const auto hint = version_mismatch("1.13", "2.11");
  ASSERT_TRUE(hint.has_value());
  EXPECT_THAT(*hint, StartsWith("ampkit hint: "));
  EXPECT_THAT(*hint, HasSubstr("built against LibTorch 1.13"));
  EXPECT_THAT(*hint, HasSubstr("runs LibTorch 2.11"));
  EXPECT_THAT(*hint, HasSubstr("Rebuild ampkit against the LibTorch you run"));
  EXPECT_EQ(version_mismatch("1.13", "1.13"), std::nullopt);
  EXPECT_EQ(version_mismatch("1.13", "1.13.1"), std::nullopt);
  EXPECT_EQ(version_mismatch("2.11", "2.11.0a0+git1234"), std::nullopt);
  EXPECT_TRUE(version_mismatch("2.1", "2.11.0").has_value());
  EXPECT_EQ(version_mismatch("1.13", ""), std::nullopt);
}

TEST(HintsTest, RunningVersionIsTheOneThisMachineHasAndMatchesTheBuild) {
  const std::string built = std::to_string(TORCH_VERSION_MAJOR) + "." +
                            std::to_string(TORCH_VERSION_MINOR);
  EXPECT_THAT(running_torch_version(), StartsWith(built + "."));
  EXPECT_EQ(built_torch_version(), built);
  EXPECT_EQ(check_torch_version(), std::nullopt);
}

}  // namespace
}  // namespace ampkit::diag
