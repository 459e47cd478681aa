// Checkpoints: the safetensors reader/writer, the all-or-nothing checkpoint
// directory, sharded save_model, and save_state/load_state resuming exactly
// in a new process, also after a crash in the middle of a save.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "ampkit/ampkit.h"
#include "ampkit/utils/warnings.h"
#include "checkpoint/files.h"
#include "test_util.h"

#ifndef AMPKIT_CHECKPOINT_WORKER
#error "AMPKIT_CHECKPOINT_WORKER must name the worker executable"
#endif

namespace {

namespace fs = std::filesystem;
namespace ck = ampkit::checkpoint;
using ::testing::HasSubstr;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) {
    s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  return s;
}

std::string with_header(const std::string& json, const std::string& data = "") {
  return le64(json.size()) + json + data;
}

void expect_decode_error(const std::string& bytes, const std::string& problem) {
  AMPKIT_EXPECT_THROWS_WITH(
      ck::decode_safetensors(bytes, "w.safetensors"), ampkit::IoError, problem);
  AMPKIT_EXPECT_THROWS_WITH(
      ck::decode_safetensors(bytes, "w.safetensors"),
      ampkit::IoError,
      "w.safetensors");
}

TEST(SafetensorsTest, RoundTripsEveryDtypeShapeAndMetadata) {
  ck::NamedTensors tensors{
      {"a.f32", torch::randn({3, 4})},
      {"b.f64", torch::randn({2}, torch::kDouble)},
      {"c.f16", torch::randn({5}).to(torch::kHalf)},
      {"d.bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"e.i64", torch::arange(4)},
      {"f.i32", torch::arange(3, torch::kInt)},
      {"g.i16", torch::arange(3, torch::kShort)},
      {"h.i8", torch::arange(-2, 2, torch::kChar)},
      {"i.u8", torch::arange(3, torch::kByte)},
      {"j.bool", torch::tensor({true, false})},
      {"k.scalar", torch::tensor(3.5)},
      {"l.empty", torch::zeros({0, 2})},
      {"m.view", torch::arange(12.).reshape({3, 4}).t()},  // non-contiguous
  };
  const std::string bytes = ck::encode_safetensors(tensors, {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8 bytes";
  auto back = ck::decode_safetensors(bytes, "x");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    EXPECT_EQ(
        back.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_TRUE(back.tensors[i].second.equal(tensors[i].second))
        << tensors[i].first;
  }
}

TEST(SafetensorsTest, EachMalformedInputIsAnErrorNamingTheProblem) {
  const std::string one =
      R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  ASSERT_NO_THROW(ck::decode_safetensors(with_header(one, data), "ok"));
  expect_decode_error("abc", "fewer than the 8");
  expect_decode_error(le64(1ull << 40) + "{}", "exceeds the limit");
  expect_decode_error(le64(500) + "{}", "runs past the end");
  expect_decode_error(with_header("[1]"), "not a JSON object");
  expect_decode_error(with_header("{\"t\": "), "malformed");
  expect_decode_error(
      with_header(
          "{\"a\":" + std::string(50, '[') + std::string(50, ']') + "}"),
      "nests deeper");
  expect_decode_error(
      with_header(
          R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})",
          "ab"),
      "dtype \"F8_E4M3\"");
  expect_decode_error(
      with_header(
          R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
      "needs 12");
  expect_decode_error(
      with_header(R"({"t":{"dtype":"F32","shape":[2]}})", data),
      "needs dtype, shape and data_offsets");
  expect_decode_error(
      with_header(
          R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
      "non-negative integers");
  expect_decode_error(with_header(one, data.substr(0, 5)), "truncated");
  expect_decode_error(with_header(one, data + "xx"), "unexpected bytes");
  expect_decode_error(
      with_header(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
          "abc"),
      "overlap or leave a gap");
  expect_decode_error(
      with_header(
          R"({"b":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "\x07"),
      "bools are 0 or 1");
  expect_decode_error(
      with_header(R"({"__metadata__":{"k":1}})"), "must be a string");
}

TEST(SafetensorsTest, RefusesWhatItCannotWrite) {
  AMPKIT_EXPECT_THROWS_WITH(
      ck::encode_safetensors({{"a", torch::Tensor()}}),
      ampkit::InvalidArgument,
      "undefined");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::encode_safetensors({{"a", torch::ones(1)}, {"a", torch::ones(1)}}),
      ampkit::InvalidArgument,
      "repeated");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::encode_safetensors({{"c", torch::ones(1, torch::kComplexFloat)}}),
      ampkit::InvalidArgument,
      "cannot store dtype");
}

class CheckpointDirTest : public ampkit::testing_util::TempDirTest {
 protected:
  std::string make(
      const std::string& name, const std::string& content = "abc") {
    const std::string dir = (dir_ / name).string();
    ck::CheckpointWriter w(dir);
    w.write("a.bin", content);
    w.write("b.bin", "second");
    ck::Manifest m;
    m.step = 7;
    w.commit(m);
    return dir;
  }
};

TEST_F(CheckpointDirTest, CommitPublishesACompleteFolderWithAManifest) {
  const std::string dir = make("c");
  EXPECT_FALSE(fs::exists(ck::partial_dir(dir)));
  const auto m = ck::verify_checkpoint(dir);
  EXPECT_EQ(m.step, 7);
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[0].name, "a.bin");
  EXPECT_EQ(m.files[0].size, 3u);
  // Saving again over it replaces it whole.
  make("c", "changed");
  EXPECT_EQ(
      ck::read_checkpoint_file(dir, ck::verify_checkpoint(dir), "a.bin"),
      "changed");
}

TEST_F(CheckpointDirTest, AnUncommittedSaveLeavesNothingLoadable) {
  const std::string dir = (dir_ / "d").string();
  {
    ck::CheckpointWriter w(dir);
    w.write("a.bin", "x");
    EXPECT_TRUE(fs::exists(ck::partial_dir(dir)));
  }  // abandoned (an exception mid-save)
  EXPECT_FALSE(fs::exists(ck::partial_dir(dir)));
  fs::create_directories(dir);
  AMPKIT_EXPECT_THROWS_WITH(
      ck::verify_checkpoint(dir), ampkit::IoError, "no manifest.json");
}

TEST_F(CheckpointDirTest, DamagedFilesAreNamed) {
  const std::string dir = make("c");
  { std::ofstream(fs::path(dir) / "a.bin") << "abd"; }
  AMPKIT_EXPECT_THROWS_WITH(
      ck::verify_checkpoint(dir), ampkit::IoError, "a.bin fails its checksum");
  { std::ofstream(fs::path(dir) / "a.bin") << "ab"; }
  AMPKIT_EXPECT_THROWS_WITH(
      ck::verify_checkpoint(dir),
      ampkit::IoError,
      "a.bin has 2 bytes, the manifest says 3");
  fs::remove(fs::path(dir) / "a.bin");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::verify_checkpoint(dir), ampkit::IoError, "a.bin is missing");
  { std::ofstream(fs::path(dir) / "manifest.json") << "{\"format\": 3"; }
  AMPKIT_EXPECT_THROWS_WITH(
      ck::verify_checkpoint(dir), ampkit::IoError, "not valid JSON");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::decode_manifest(
          R"({"format":"ampkit-checkpoint","version":1,"ampkit_version":"x","world_size":1,"step":0,"files":[{"name":"../etc","size":1,"crc32c":0}]})",
          "m"),
      ampkit::IoError,
      "not a plain file name");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::decode_manifest(R"({"format":"ampkit-checkpoint","version":9})", "m"),
      ampkit::IoError,
      "newer than this ampkit reads");
  // Found by bench/fuzz_checkpoint.sh: numbers that do not fit were converted.
  for (const char* step :
       {"1e300", "-1.5", "123456789012345678901234567890", "-1"}) {
    AMPKIT_EXPECT_THROWS_WITH(
        ck::decode_manifest(
            std::string(
                R"({"format":"ampkit-checkpoint","version":1,"ampkit_version":"","world_size":1,"step":)") +
                step + R"(,"files":[]})",
            "m"),
        ampkit::IoError,
        "\"step\" must be an integer");
  }
}

TEST_F(
    CheckpointDirTest,
    LatestSkipsIncompleteAndCorruptAndTotalLimitPrunesTheOldest) {
  fs::create_directories(dir_ / "checkpoints");
  make("checkpoints/checkpoint_0");
  make("checkpoints/checkpoint_1");
  make("checkpoints/checkpoint_2");
  fs::create_directories(dir_ / "checkpoints/checkpoint_3");  // no manifest
  fs::create_directories(
      dir_ / "checkpoints/checkpoint_4.partial");  // a crashed save
  { std::ofstream(dir_ / "checkpoints/checkpoint_2/b.bin") << "damaged"; }
  const auto root = (dir_ / "checkpoints").string();
  std::vector<std::string> warnings;
  auto previous = ampkit::set_warning_handler(
      [&](const ampkit::Warning& w) { warnings.push_back(w.message); });
  const auto latest = ck::latest_checkpoint(root);
  ampkit::set_warning_handler(previous);
  EXPECT_EQ(latest, (dir_ / "checkpoints/checkpoint_1").string());
  // Each one passed over is named, with the check it failed.
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(
      warnings[0],
      HasSubstr(
          "damaged checkpoint: " + root + "/checkpoint_3 has no manifest"));
  EXPECT_THAT(warnings[1], HasSubstr("b.bin has 7 bytes, the manifest says 6"));
  ck::enforce_total_limit(root, 2);
  EXPECT_FALSE(fs::exists(dir_ / "checkpoints/checkpoint_0"));
  EXPECT_TRUE(fs::exists(dir_ / "checkpoints/checkpoint_1"));
  EXPECT_FALSE(fs::exists(dir_ / "checkpoints/checkpoint_4.partial"));
  EXPECT_FALSE(ck::latest_checkpoint((dir_ / "none").string()).has_value());
}

// Only damaged checkpoints: `latest` must not answer "none yet", which
// makes a re-run start fresh and save over them.
TEST_F(CheckpointDirTest, LatestRefusesWhenEveryCheckpointIsDamaged) {
  const auto root = (dir_ / "checkpoints").string();
  make("checkpoints/checkpoint_30");
  { std::ofstream(dir_ / "checkpoints/checkpoint_30/a.bin") << "abd"; }
  AMPKIT_EXPECT_THROWS_WITH(
      ck::latest_checkpoint(root), ampkit::IoError, "none is intact");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::latest_checkpoint(root), ampkit::IoError, "a.bin fails its checksum");
  AMPKIT_EXPECT_THROWS_WITH(
      ck::latest_checkpoint(root),
      ampkit::IoError,
      "--resume-from-checkpoint none");
  // Nothing was touched.
  EXPECT_TRUE(fs::exists(dir_ / "checkpoints/checkpoint_30/a.bin"));
}

// A save never deletes a damaged checkpoint of the same name: it is kept
// as <name>.damaged (then .damaged.1), with a warning.
TEST_F(CheckpointDirTest, SavingOverADamagedCheckpointSetsItAside) {
  const auto dir = make("checkpoint_30");
  { std::ofstream(fs::path(dir) / "a.bin") << "abd"; }
  std::vector<std::string> warnings;
  auto previous = ampkit::set_warning_handler(
      [&](const ampkit::Warning& w) { warnings.push_back(w.message); });
  make("checkpoint_30", "new");
  { std::ofstream(fs::path(dir) / "b.bin") << "damaged"; }
  make("checkpoint_30", "newer");
  ampkit::set_warning_handler(previous);
  EXPECT_EQ(
      ck::read_checkpoint_file(dir, ck::verify_checkpoint(dir), "a.bin"),
      "newer");
  EXPECT_EQ(
      ampkit::testing_util::read_file(fs::path(dir + ".damaged") / "a.bin"),
      "abd");
  EXPECT_EQ(
      ampkit::testing_util::read_file(fs::path(dir + ".damaged.1") / "b.bin"),
      "damaged");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("it is kept as " + dir + ".damaged"));
  EXPECT_THAT(warnings[0], HasSubstr("a.bin fails its checksum"));
  // Set-aside folders are not checkpoints: `latest` sees only the new one.
  EXPECT_EQ(ck::list_checkpoints(dir_.string()).size(), 1u);
  EXPECT_EQ(ck::latest_checkpoint(dir_.string()), dir);
}

struct TwoLayerImpl : torch::nn::Module {
  explicit TwoLayerImpl(int64_t hidden = 64)
      : fc1(register_module("fc1", torch::nn::Linear(32, hidden))),
        norm(register_module("norm", torch::nn::BatchNorm1d(hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 4))) {}
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d norm;
  torch::nn::Linear fc2;
};
TORCH_MODULE(TwoLayer);

TEST_F(CheckpointDirTest, SaveModelShardsAboveTheLimitWithAnIndexAndLoadsBack) {
  TwoLayer a, b;
  const auto out = (dir_ / "weights").string();
  ck::save_model(*a, out, "5KB");  // fc1.weight alone is 8 KB
  EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors"));
  std::ifstream index(fs::path(out) / "model.safetensors.index.json");
  std::stringstream text;
  text << index.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"weight_map\""));
  EXPECT_THAT(text.str(), HasSubstr("\"fc1.weight\": \"model-00001-of-0000"));
  EXPECT_THAT(text.str(), HasSubstr("\"norm.running_mean\""));
  ck::load_model(*b, out);
  for (const auto& [name, t] : ck::model_state(*a)) {
    bool found = false;
    for (const auto& [n, u] : ck::model_state(*b)) {
      if (n == name) {
        found = true;
        EXPECT_TRUE(u.equal(t)) << name;
      }
    }
    EXPECT_TRUE(found) << name;
  }
  // A later unsharded save removes the old shards.
  ck::save_model(*a, out);
  EXPECT_TRUE(fs::exists(fs::path(out) / "model.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "model-00001-of-00002.safetensors"));
  AMPKIT_EXPECT_THROWS_WITH(
      ck::parse_shard_size("ten"), ampkit::InvalidArgument, "'ten'");
  EXPECT_EQ(ck::parse_shard_size("10GB"), 10'000'000'000ull);
  EXPECT_EQ(ck::parse_shard_size("2GiB"), 2ull << 30);
}

TEST_F(
    CheckpointDirTest,
    LoadModelListsMissingUnexpectedAndMismatchedAndLoadsNothing) {
  TwoLayer a(64), wider(80);
  const auto out = (dir_ / "w").string();
  ck::NamedTensors state = ck::model_state(*a);
  state.erase(state.begin());                        // fc1.weight missing
  state.emplace_back("extra.bias", torch::ones(2));  // unexpected
  fs::create_directories(out);
  ck::save_safetensors(out + "/model.safetensors", state);
  const auto before = wider->fc2->weight.clone();
  try {
    ck::load_model(*wider, out);
    ADD_FAILURE() << "expected an error";
  } catch (const ampkit::InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("missing: fc1.weight"));
    EXPECT_THAT(m, HasSubstr("unexpected: extra.bias"));
    EXPECT_THAT(
        m, HasSubstr("shape mismatch: fc1.bias (checkpoint [64], model [80])"));
    EXPECT_THAT(m, HasSubstr("nothing was loaded"));
  }
  EXPECT_TRUE(wider->fc2->weight.equal(before));
  AMPKIT_EXPECT_THROWS_WITH(
      ck::load_model(*wider, (dir_ / "nothing").string()),
      ampkit::IoError,
      "no weights in");
}

// --- save_state / load_state ------------------------------------------------

struct Run {
  int code = -1;  // exit code, or -signal
  std::string out;
};

// Runs the worker; with kill_after > 0 it is SIGKILLed that long after
// `armed` first returns true (no `armed`: after the start).
Run run_worker(
    const std::vector<std::string>& args,
    const std::vector<std::string>& env = {},
    std::chrono::milliseconds kill_after = std::chrono::milliseconds(0),
    const std::function<bool()>& armed = nullptr) {
  const std::string log =
      "/tmp/ampkit-ckpt-" + std::to_string(::getpid()) + ".log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) {
      ::putenv(const_cast<char*>(e.c_str()));
    }
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(AMPKIT_CHECKPOINT_WORKER)};
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  Run r;
  int status = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  if (!armed) {
    kill_at = std::chrono::steady_clock::now() + kill_after;
  }
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!kill_at && armed()) {
      kill_at = now + kill_after;
    }
    if (now > deadline ||
        (kill_after.count() > 0 && kill_at && now > *kill_at)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  r.out = s.str();
  ::unlink(log.c_str());
  return r;
}

std::vector<torch::Tensor> load_params(const fs::path& path) {
  std::vector<torch::Tensor> p;
  torch::load(p, path.string());
  return p;
}

class ResumeTest : public ampkit::testing_util::TempDirTest {
 protected:
  // 9 steps straight against 5, save, and 4 more in a new process.
  void expect_exact_resume(const std::string& precision, int64_t save_at) {
    const auto straight = (dir_ / "straight.pt").string();
    const auto part = (dir_ / "part.pt").string();
    const auto resumed = (dir_ / "resumed.pt").string();
    const auto ckpt = (dir_ / "ckpt").string();
    auto a = run_worker({"train", precision, "9", straight});
    ASSERT_EQ(a.code, 0) << a.out;
    auto b = run_worker(
        {"train",
         precision,
         std::to_string(save_at),
         part,
         "--save-at",
         std::to_string(save_at),
         ckpt});
    ASSERT_EQ(b.code, 0) << b.out;
    auto c = run_worker({"train", precision, "9", resumed, "--resume", ckpt});
    ASSERT_EQ(c.code, 0) << c.out;
    const auto x = load_params(straight), y = load_params(resumed);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(x[i].equal(y[i]))
          << precision << " tensor " << i << " differs by "
          << (x[i] - y[i]).abs().max().item<double>();
    }
  }
};

TEST_F(ResumeTest, NewProcessResumesBitIdenticallyInFp32MidEpoch) {
  expect_exact_resume("no", 5);  // step 5 = batch 10 of 13: mid-epoch
}

TEST_F(ResumeTest, NewProcessResumesBitIdenticallyAtAnEpochBoundary) {
  expect_exact_resume("no", 7);  // the 7th step ends epoch 0 (13 batches)
}

TEST_F(ResumeTest, NewProcessResumesBitIdenticallyInBf16Autocast) {
  expect_exact_resume("bf16", 5);
}

TEST_F(ResumeTest, NewProcessResumesBitIdenticallyWithTheGradScaler) {
  expect_exact_resume("scaler", 5);  // the scale is compared too
}

TEST_F(ResumeTest, GradScalerStateRoundTripsWithoutChangingTheScale) {
  auto options =
      ampkit::AcceleratorOptions()
          .cpu(true)
          .quiet(true)
          .loss_scaling(true)
          .grad_scaler(
              ampkit::GradScalerOptions().init_scale(1024).growth_interval(2));
  torch::manual_seed(0);
  torch::nn::Linear lin(3, 1);
  torch::optim::SGD sgd(lin->parameters(), 0.1);
  ampkit::Accelerator acc(options);
  auto [model, opt] = acc.prepare(lin, sgd);
  for (int i = 0; i < 3; ++i) {  // growth after 2 good steps: 2048, pending
    acc.backward(model(torch::ones({2, 3})).sum());
    opt.step();
    opt.zero_grad();
  }
  const auto dir = (dir_ / "s").string();
  acc.save_state(dir);
  const double saved = acc.scaler()->get_scale();
  const auto saved_state = acc.scaler()->state_dict();

  torch::nn::Linear lin2(3, 1);
  torch::optim::SGD sgd2(lin2->parameters(), 0.1);
  ampkit::Accelerator acc2(options);
  auto [model2, opt2] = acc2.prepare(lin2, sgd2);
  acc2.load_state(dir);
  EXPECT_EQ(acc2.scaler()->get_scale(), saved);
  const auto loaded_state = acc2.scaler()->state_dict();
  EXPECT_EQ(
      loaded_state.at("scale").toDouble(), saved_state.at("scale").toDouble());
  EXPECT_EQ(
      loaded_state.at("_growth_tracker").toInt(),
      saved_state.at("_growth_tracker").toInt());
  EXPECT_EQ(acc2.optimizer_steps(), acc.optimizer_steps());
  EXPECT_TRUE(lin2->weight.equal(lin->weight));
}

TEST_F(ResumeTest, LoadStateRefusesOtherObjectsAndChangesNothing) {
  torch::nn::Linear lin(3, 1);
  torch::optim::SGD sgd(lin->parameters(), 0.1);
  ampkit::Accelerator acc(ampkit::AcceleratorOptions().cpu(true).quiet(true));
  auto [model, opt] = acc.prepare(lin, sgd);
  const auto dir = (dir_ / "s").string();
  acc.save_state(dir);
  // Saved by 2 processes (the manifest says so), resumed by 1: allowed.
  std::string m = ck::detail::read_file(dir + "/manifest.json");
  m.replace(m.find("\"world_size\": 1"), 15, "\"world_size\": 2");
  ck::detail::write_file_synced(dir + "/manifest.json", m);
  EXPECT_NO_THROW(acc.load_state(dir));
  // Another set of prepared objects.
  const auto dir2 = (dir_ / "s2").string();
  acc.save_state(dir2);
  torch::nn::Linear other(3, 1);
  torch::optim::SGD sgd2(other->parameters(), 0.1);
  ampkit::Accelerator acc2(ampkit::AcceleratorOptions().cpu(true).quiet(true));
  auto [m2, o2] = acc2.prepare(other, sgd2);
  torch::nn::Linear third(3, 1);
  auto m3 = acc2.prepare(third);
  const auto before = third->weight.clone();
  AMPKIT_EXPECT_THROWS_WITH(
      acc2.load_state(dir2),
      ampkit::InvalidArgument,
      "holds 1 models (model*.safetensors), but this Accelerator has 2");
  EXPECT_TRUE(third->weight.equal(before));
  // Damaged model file: named, nothing loaded.
  ampkit::Accelerator acc3(ampkit::AcceleratorOptions().cpu(true).quiet(true));
  torch::nn::Linear fourth(3, 1);
  torch::optim::SGD sgd4(fourth->parameters(), 0.1);
  auto [m4, o4] = acc3.prepare(fourth, sgd4);
  {
    std::ofstream f(dir2 + "/model.safetensors", std::ios::app);
    f << "x";
  }
  AMPKIT_EXPECT_THROWS_WITH(
      acc3.load_state(dir2), ampkit::IoError, "model.safetensors has");
  AMPKIT_EXPECT_THROWS_WITH(
      acc3.load_state((dir_ / "none").string()),
      ampkit::IoError,
      "no checkpoint at");
  AMPKIT_EXPECT_THROWS_WITH(
      acc3.load_state(), ampkit::IoError, "found no complete checkpoint");
  AMPKIT_EXPECT_THROWS_WITH(
      acc3.save_state(), ampkit::UsageError, "automatic_checkpoint_naming");
}

TEST_F(ResumeTest, SigkillInTheMiddleOfASaveKeepsThePreviousCheckpoint) {
  const auto project = (dir_ / "p").string();
  // Each save writes 7 files and the manifest; the 12th file is in the
  // second save.
  auto crashed = run_worker(
      {"train", "no", "6", (dir_ / "x.pt").string(), "--save-every", project},
      {"AMPKIT_FAULT_INJECT=kill_after_files=12"});
  ASSERT_EQ(crashed.code, -SIGKILL) << crashed.out;
  EXPECT_TRUE(fs::exists(project + "/checkpoints/checkpoint_1.partial"));
  EXPECT_EQ(
      ck::latest_checkpoint(project + "/checkpoints"),
      project + "/checkpoints/checkpoint_0");
  // The same command line resumes from the last good one, and matches a
  // straight run.
  auto straight =
      run_worker({"train", "no", "6", (dir_ / "straight.pt").string()});
  ASSERT_EQ(straight.code, 0) << straight.out;
  auto resumed = run_worker(
      {"train",
       "no",
       "6",
       (dir_ / "resumed.pt").string(),
       "--save-every",
       project,
       "--resume",
       "latest"});
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_THAT(
      resumed.out,
      HasSubstr("checkpoints/checkpoint_1\n"));  // numbering continues
  const auto x = load_params(dir_ / "straight.pt"),
             y = load_params(dir_ / "resumed.pt");
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(x[i].equal(y[i])) << i;
  }
  // total_limit 2: only the newest two remain, and no partial folder.
  EXPECT_EQ(ck::list_checkpoints(project + "/checkpoints").size(), 2u);
  EXPECT_FALSE(fs::exists(project + "/checkpoints/checkpoint_1.partial"));
}

TEST_F(ResumeTest, RealSigkillsAtRandomMomentsNeverLeaveAnUnloadableLatest) {
  const auto project = (dir_ / "p").string();
  // The clock starts once a complete checkpoint exists (a busy machine can
  // take seconds to get there), then the kill lands somewhere in the
  // save-every-step cycle.
  const auto has_complete_checkpoint = [&] {
    // The worker renames and prunes folders meanwhile: no throwing calls.
    std::error_code ec;
    for (fs::directory_iterator it(project + "/checkpoints", ec), end;
         !ec && it != end;
         it.increment(ec)) {
      if (it->path().extension() != ".partial" &&
          fs::exists(it->path() / "manifest.json", ec)) {
        return true;
      }
    }
    return false;
  };
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto r = run_worker(
        {"train",
         "no",
         "100000",
         (dir_ / "x.pt").string(),
         "--save-every",
         project},
        {},
        std::chrono::milliseconds(60 + 211 * attempt),
        has_complete_checkpoint);
    ASSERT_EQ(r.code, -SIGKILL) << r.out;
    auto latest = ck::latest_checkpoint(project + "/checkpoints");
    ASSERT_TRUE(latest.has_value()) << r.out;
    EXPECT_NO_THROW(ck::verify_checkpoint(*latest));
  }
  auto resumed = run_worker(
      {"train",
       "no",
       "3",
       (dir_ / "r.pt").string(),
       "--resume",
       "latest",
       "--save-every",
       project});
  // The step counter was restored, so 3 steps are long done: it stops at once.
  EXPECT_EQ(resumed.code, 0) << resumed.out;
}

}  // namespace
