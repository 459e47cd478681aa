// Tests of the config file: accelerate's own files load as they are, a save
// loads back equal, JSON, every error message, and where the file lives.
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ampkit/config/config.h"
#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit::config {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using Passthrough = std::vector<std::pair<std::string, std::string>>;

// accelerate's default_config.yaml files, checked in under samples/.
const fs::path kSamples = AMPKIT_CONFIG_SAMPLES;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool equal(const LaunchConfig& a, const LaunchConfig& b) {
  return a.compute_environment == b.compute_environment &&
         a.distributed_type == b.distributed_type &&
         a.mixed_precision == b.mixed_precision &&
         a.num_processes == b.num_processes &&
         a.num_machines == b.num_machines && a.machine_rank == b.machine_rank &&
         a.main_process_ip == b.main_process_ip &&
         a.main_process_port == b.main_process_port && a.use_cpu == b.use_cpu &&
         a.gpu_ids == b.gpu_ids && a.debug == b.debug &&
         a.same_network == b.same_network && a.rdzv_backend == b.rdzv_backend &&
         a.gradient_accumulation_steps == b.gradient_accumulation_steps &&
         a.log_with == b.log_with &&
         a.main_training_function == b.main_training_function &&
         a.passthrough == b.passthrough;
}

using ConfigFileTest = ampkit::testing_util::TempDirTest;

TEST(ConfigSampleTest, AccelerateSingleNodeMultiGpuFileLoadsAsItIs) {
  const LaunchConfig config =
      load_config((kSamples / "multi_gpu.yaml").string());
  EXPECT_EQ(config.compute_environment, "LOCAL_MACHINE");
  EXPECT_EQ(config.distributed_type, "MULTI_GPU");
  EXPECT_EQ(config.mixed_precision, Precision::bf16);
  EXPECT_EQ(config.num_processes, 2);
  EXPECT_EQ(config.num_machines, 1);
  EXPECT_EQ(config.gpu_ids, "all");
  EXPECT_FALSE(config.use_cpu);
  EXPECT_FALSE(config.debug);
  EXPECT_TRUE(config.same_network);
  EXPECT_EQ(
      config.passthrough,
      (Passthrough{
          {"downcast_bf16", "'no'"},
          {"enable_cpu_affinity", "false"},
          {"tpu_env", "[]"},
          {"tpu_use_cluster", "false"},
          {"tpu_use_sudo", "false"}}));
}

TEST(ConfigSampleTest, AccelerateMultiCpuFileLoadsAsItIs) {
  const LaunchConfig config =
      load_config((kSamples / "multi_cpu.yaml").string());
  EXPECT_EQ(config.distributed_type, "MULTI_CPU");
  EXPECT_EQ(config.num_processes, 16);
  EXPECT_EQ(config.num_machines, 4);
  EXPECT_EQ(config.main_process_ip, "36.112.23.24");
  EXPECT_EQ(config.main_process_port, 29500);
  EXPECT_TRUE(config.use_cpu);
  ASSERT_EQ(config.passthrough.size(), 5u);
  EXPECT_EQ(config.passthrough[1].first, "mpirun_config");
  EXPECT_EQ(config.passthrough[1].second, "{}");
}

TEST(ConfigSampleTest, OlderAccelerateKeysAreReadIntoTheCurrentOnes) {
  const LaunchConfig config = load_config((kSamples / "legacy.yaml").string());
  EXPECT_EQ(config.mixed_precision, Precision::fp16);
  EXPECT_EQ(config.main_process_port, 0);
  EXPECT_EQ(config.main_process_ip, "");
  EXPECT_EQ(
      config.passthrough,
      (Passthrough{
          {"deepspeed_config", "{}"},
          {"dynamo_config", "{}"},
          {"fsdp_config", "{}"}}));
}

TEST(ConfigSampleTest, JsonConfigLoadsLikeItsYaml) {
  const LaunchConfig config =
      load_config((kSamples / "multi_gpu.json").string());
  EXPECT_EQ(config.distributed_type, "MULTI_GPU");
  EXPECT_EQ(config.mixed_precision, Precision::fp16);
  EXPECT_EQ(config.gpu_ids, "0,1");
  EXPECT_EQ(config.num_processes, 2);
  LaunchConfig yaml = load_config((kSamples / "multi_gpu.yaml").string());
  EXPECT_EQ(config.passthrough, yaml.passthrough);
}

TEST_F(ConfigFileTest, SavedConfigLoadsBackEqualInAccelerateOrder) {
  LaunchConfig config = load_config((kSamples / "multi_cpu.yaml").string());
  config.mixed_precision = Precision::no;
  config.log_with = "jsonl,tensorboard";
  config.gpu_ids = "0";
  const std::string path = (dir_ / "sub" / "saved.yaml").string();
  save_config(config, path);
  EXPECT_TRUE(equal(load_config(path), config)) << read(path);
  const std::string text = read(path);
  EXPECT_THAT(text, HasSubstr("distributed_type: MULTI_CPU\n"));
  EXPECT_THAT(text, HasSubstr("downcast_bf16: 'no'\n"));
  EXPECT_THAT(text, HasSubstr("gpu_ids: '0'\n"));
  EXPECT_THAT(text, HasSubstr("mixed_precision: 'no'\n"));
  EXPECT_THAT(text, HasSubstr("mpirun_config: {}\n"));
  EXPECT_THAT(text, HasSubstr("tpu_env: []\n"));
  EXPECT_LT(text.find("compute_environment"), text.find("debug"));
  EXPECT_LT(text.find("num_processes"), text.find("use_cpu"));
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
  // accelerate's ClusterConfig refuses keys it lacks: log_with (and
  // gradient_accumulation_steps) go into ampkit's file beside it.
  EXPECT_THAT(text, ::testing::Not(HasSubstr("log_with")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("gradient_accumulation_steps")));
  EXPECT_THAT(
      read(ampkit_settings_path(path)),
      HasSubstr("log_with: jsonl,tensorboard\n"));
  config.gradient_accumulation_steps = 3;
  save_config(config, path);
  EXPECT_TRUE(equal(load_config(path), config));
  EXPECT_THAT(
      read(ampkit_settings_path(path)),
      HasSubstr("gradient_accumulation_steps: 3\n"));
  config.gradient_accumulation_steps = 1;
  config.log_with = "";
  save_config(config, path);
  EXPECT_FALSE(fs::exists(ampkit_settings_path(path)))
      << "nothing ampkit-only left: no file";
  EXPECT_TRUE(equal(load_config(path), config));
}

TEST_F(ConfigFileTest, DefaultsRoundTripAndQuoteYamlWords) {
  LaunchConfig config;
  const std::string path = (dir_ / "defaults.yaml").string();
  save_config(config, path);
  EXPECT_TRUE(equal(load_config(path), config));
  EXPECT_THAT(read(path), HasSubstr("distributed_type: 'NO'\n"));
  EXPECT_THAT(read(path), Not(HasSubstr("main_process_port")));
}

TEST_F(ConfigFileTest, JsonPassthroughIsSavedAsYaml) {
  const std::string path = write(
      "c.json",
      "{\"distributed_type\": \"NO\",\n \"fsdp_config\": {\"fsdp_offload_"
      "params\": false},\n \"downcast_bf16\": \"no\"}\n");
  const LaunchConfig config = load_config(path);
  const std::string out = (dir_ / "c.yaml").string();
  save_config(config, out);
  EXPECT_THAT(
      read(out), HasSubstr("fsdp_config:\n  fsdp_offload_params: false\n"));
  EXPECT_THAT(read(out), HasSubstr("downcast_bf16: 'no'\n"));
  EXPECT_TRUE(equal(load_config(out), config));
}

TEST_F(ConfigFileTest, UnknownKeyNamesItsLineAndTheKnownKeys) {
  const std::string path = write(
      "unknown.yaml",
      "distributed_type: 'NO'\nmixed_precision: bf16\nnum_procesess: 2\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path),
      InvalidArgument,
      path + ":3: unknown key 'num_procesess'. Known keys: ");
  AMPKIT_EXPECT_THROWS_WITH(load_config(path), ConfigError, "num_processes");
  try {
    load_config(path);
  } catch (const ConfigError& e) {
    EXPECT_TRUE(e.unknown_key());
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.key(), "num_procesess");
  }
}

TEST_F(ConfigFileTest, UnknownJsonKeyNamesItsLine) {
  const std::string path = write(
      "unknown.json", "{\n  \"mixed_precision\": \"bf16\",\n  \"fp8\": 1\n}\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path), InvalidArgument, path + ":3: unknown key 'fp8'");
}

TEST_F(ConfigFileTest, WrongTypeGivesKeyValueAndValidValues) {
  const std::string path =
      write("type.yaml", "num_processes: two\nuse_cpu: maybe\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path),
      InvalidArgument,
      path +
          ":1: key 'num_processes' must be an integer, got 'two'. "
          "Valid values: an integer from 1 up.");
  const std::string flag = write("flag.yaml", "use_cpu: maybe\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(flag),
      InvalidArgument,
      flag +
          ":1: key 'use_cpu' must be a boolean, got 'maybe'. Valid values: "
          "true, false.");
  const std::string list = write("list.yaml", "machine_rank: [0, 1]\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(list),
      InvalidArgument,
      "key 'machine_rank' must be a single value");
  const std::string gpus = write("gpus.yaml", "gpu_ids: 0,x\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(gpus),
      InvalidArgument,
      "got '0,x'. Valid values: all, or GPU");
}

TEST_F(ConfigFileTest, BadMixedPrecisionListsThePrecisions) {
  const std::string path =
      write("mp.yaml", "num_processes: 1\nmixed_precision: fp64\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path),
      InvalidArgument,
      path +
          ":2: key 'mixed_precision' is not a precision, got 'fp64'. "
          "Valid values: no, fp16, bf16, auto.");
  // A bad value is found before an unknown key further up.
  const std::string both =
      write("both.yaml", "typo: 1\nmixed_precision: fp64\n");
  AMPKIT_EXPECT_THROWS_WITH(load_config(both), InvalidArgument, "fp64");
}

TEST_F(ConfigFileTest, DistributedTypeOfAccelerateOnlyIsRefusedByName) {
  const std::string megatron =
      write("megatron.yaml", "distributed_type: MEGATRON_LM\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(megatron),
      InvalidArgument,
      megatron +
          ":1: key 'distributed_type' is not supported by ampkit: use NO, "
          "MULTI_CPU, MULTI_GPU, DEEPSPEED (ZeRO stages 1-3) or FSDP, got "
          "'MEGATRON_LM'.");
  const std::string typo = write("typo.yaml", "distributed_type: MULTI_GUP\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(typo),
      InvalidArgument,
      "got 'MULTI_GUP'. Valid values: NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, "
      "FSDP.");
}

// Both rendezvous spellings meet on machine 0's launcher; etcd needs a
// server ampkit has no client for, and is refused rather than ignored.
TEST_F(ConfigFileTest, RdzvBackendEtcdIsRefusedAndC10dKept) {
  const std::string c10d =
      write("c10d.yaml", "num_machines: 2\nrdzv_backend: C10D\n");
  EXPECT_EQ(load_config(c10d).rdzv_backend, "c10d");
  const std::string etcd = write("etcd.yaml", "rdzv_backend: etcd-v2\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(etcd),
      InvalidArgument,
      etcd +
          ":1: key 'rdzv_backend' asks for an etcd server, which ampkit has "
          "no client for, got 'etcd-v2'.");
  const std::string typo = write("typo.yaml", "rdzv_backend: c10\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(typo), InvalidArgument, "Valid values: static, c10d");
}

// accelerate refuses mixed_precision auto: the file it may read says 'no',
// ampkit's own file beside it says auto, and ampkit reads auto back until
// the config is changed to another precision.
TEST_F(ConfigFileTest, AutoPrecisionStaysOutOfTheFileAccelerateReads) {
  LaunchConfig config;
  config.mixed_precision = Precision::automatic;
  const std::string path = (dir_ / "default_config.yaml").string();
  save_config(config, path);
  std::ifstream in(path);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  EXPECT_THAT(text, HasSubstr("mixed_precision: 'no'\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("auto")));
  const std::string ours = (dir_ / "default_config.ampkit.yaml").string();
  EXPECT_EQ(ampkit_settings_path(path), ours);
  EXPECT_TRUE(std::filesystem::exists(ours));
  EXPECT_EQ(load_config(path).mixed_precision, Precision::automatic);
  // `accelerate config` changed it to bf16: that wins.
  write("default_config.yaml", "mixed_precision: bf16\n");
  EXPECT_EQ(load_config(path).mixed_precision, Precision::bf16);
  // Saving another precision removes ampkit's file.
  config.mixed_precision = Precision::fp16;
  save_config(config, path);
  EXPECT_FALSE(std::filesystem::exists(ours));
  EXPECT_EQ(load_config(path).mixed_precision, Precision::fp16);
  write("default_config.ampkit.yaml", "num_processes: 4\n");
  write("default_config.yaml", "mixed_precision: 'no'\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path),
      InvalidArgument,
      "ampkit's settings file holds mixed_precision: auto, "
      "gradient_accumulation_steps and log_with, got key 'num_processes'");
}

// An accelerate DeepSpeed config as `accelerate config` writes it runs on
// ampkit's ZeRO; what ampkit does not implement is refused by name.
TEST_F(ConfigFileTest, DeepSpeedConfigRunsOnZeroAndRefusesWhatItLacks) {
  const std::string accelerate_written = write(
      "ds.yaml",
      "compute_environment: LOCAL_MACHINE\n"
      "debug: false\n"
      "deepspeed_config:\n"
      "  gradient_accumulation_steps: 4\n"
      "  gradient_clipping: 1.0\n"
      "  offload_optimizer_device: none\n"
      "  offload_param_device: none\n"
      "  zero3_init_flag: false\n"
      "  zero_stage: 2\n"
      "distributed_type: DEEPSPEED\n"
      "downcast_bf16: 'no'\n"
      "machine_rank: 0\n"
      "main_training_function: main\n"
      "mixed_precision: bf16\n"
      "num_machines: 1\n"
      "num_processes: 2\n"
      "use_cpu: true\n");
  const LaunchConfig config = load_config(accelerate_written);
  EXPECT_EQ(config.distributed_type, "DEEPSPEED");
  EXPECT_EQ(config.zero_stage, 2);
  EXPECT_EQ(config.gradient_clipping, 1.0);
  EXPECT_EQ(config.gradient_accumulation_steps, 4);
  // No deepspeed_config: DeepSpeedPlugin's default stage 2.
  EXPECT_EQ(
      load_config(write("bare.yaml", "distributed_type: DEEPSPEED\n"))
          .zero_stage,
      2);

  auto refused = [&](const std::string& line, const std::string& message) {
    const std::string path = write(
        "refused.yaml",
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  " + line + "\n");
    AMPKIT_EXPECT_THROWS_WITH(load_config(path), InvalidArgument, message);
  };
  // Stage 3 is ampkit's FSDP FULL_SHARD.
  const std::string three = write(
      "three.yaml",
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
      "zero_stage: 3\n");
  EXPECT_EQ(load_config(three).zero_stage, 3);
  refused(
      "offload_optimizer_device: cpu",
      "deepspeed_config.offload_optimizer_device 'cpu': offloading to the "
      "CPU or NVMe is not implemented by ampkit");
  refused(
      "offload_param_device: nvme", "deepspeed_config.offload_param_device");
  refused(
      "deepspeed_config_file: ds.json",
      "deepspeed_config.deepspeed_config_file 'ds.json' is a DeepSpeed "
      "setting ampkit does not implement");
  refused("zero3_init_flag: true", "DeepSpeed's stage-3 initialisation");
  refused("zero_stage: two", "is not a ZeRO stage. Valid values: 0, 1, 2, 3.");
  refused("gradient_clipping: -1", "must be a number >= 0");
  refused("zero_stages: 2", "unknown key deepspeed_config.zero_stages");
}

// accelerate's other plugin sections load when they ask for nothing (as
// `accelerate config` writes them for a DDP run) and are refused by key and
// value when they ask for what ampkit does not do.
TEST_F(ConfigFileTest, PluginSectionsAreCheckedNotIgnored) {
  const LaunchConfig off = load_config(write(
      "off.yaml",
      "distributed_type: MULTI_CPU\n"
      "dynamo_config:\n  dynamo_backend: 'NO'\n  dynamo_mode: default\n"
      "fsdp_config: {}\n"
      "ipex_config:\n  ipex: false\n"
      "megatron_lm_config:\n  megatron_lm_tp_degree: 1\n"
      "tp_config:\n  tp_size: 1\n"));
  EXPECT_EQ(off.passthrough.size(), 5u);

  auto refused = [&](const std::string& yaml, const std::string& message) {
    SCOPED_TRACE(yaml);
    AMPKIT_EXPECT_THROWS_WITH(
        load_config(write("refused.yaml", yaml)), InvalidArgument, message);
  };
  refused(
      "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n",
      ":1: fsdp_config.fsdp_sharding_strategy 'FULL_SHARD': fsdp_config "
      "applies to distributed_type FSDP only");
  refused(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: "
      "HYBRID_SHARD_ZERO3\n",
      "fsdp_config.fsdp_sharding_strategy 'HYBRID_SHARD_ZERO3' is not a "
      "sharding strategy");
  refused(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n",
      "fsdp_config.fsdp_offload_params 'true': offloading parameters");
  refused(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch: "
      "BACKWARD_SOON\n",
      "fsdp_config.fsdp_backward_prefetch 'BACKWARD_SOON' is not a backward "
      "prefetch policy");
  refused(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_state_dict_type: "
      "LOCAL_STATE_DICT\n",
      "fsdp_config.fsdp_state_dict_type 'LOCAL_STATE_DICT': LOCAL_STATE_DICT "
      "(deprecated in PyTorch) is not built");
  refused(
      "dynamo_config:\n  dynamo_backend: INDUCTOR\n",
      "dynamo_config.dynamo_backend 'INDUCTOR': TorchDynamo compiles Python "
      "bytecode");
  refused(
      "num_processes: 1\ndynamo_backend: INDUCTOR\n",
      ":2: dynamo_config.dynamo_backend 'INDUCTOR'");
  refused("ipex_config:\n  ipex: true\n", "ipex_config.ipex 'true'");
  refused(
      "megatron_lm_config:\n  megatron_lm_pp_degree: 4\n",
      "megatron_lm_config.megatron_lm_pp_degree '4': Megatron-LM's");
  refused(
      "tp_config:\n  tp_size: 2\n",
      "tp_config.tp_size '2': tensor parallelism is not implemented");
  refused(
      "tp_config:\n  tp_sizes: 1\n",
      "unknown key tp_config.tp_sizes. Known keys: tp_size.");
  refused("fsdp_config: [1, 2]\n", "fsdp_config must be a mapping");
  // What accelerate writes when the setting is not used loads; anything
  // else is refused by name, never kept and ignored.
  const LaunchConfig unused = load_config(write(
      "unused.yaml",
      "fp8_config: {}\nmpirun_config: {}\ndowncast_bf16: 'no'\n"
      "tpu_env: []\ntpu_name: null\ntpu_use_sudo: false\n"
      "main_training_function: main\n"));
  EXPECT_EQ(unused.passthrough.size(), 6u);
  refused(
      "mpirun_config:\n  mpirun_hostfile: /home/user/hostfile\n",
      "mpirun_config.mpirun_hostfile '/home/user/hostfile': ampkit launch "
      "starts the processes itself");
  refused(
      "fp8_config:\n  backend: TE\n", "fp8_config.backend 'TE': fp8 training");
  refused(
      "downcast_bf16: 'yes'\n",
      "downcast_bf16 'yes': a setting of accelerate's TPU pods");
  refused("tpu_vm:\n- vm\n", "tpu_vm '- vm': a setting of accelerate's TPU");
  refused(
      "main_training_function: train\n",
      "key 'main_training_function' names a Python function for accelerate's "
      "TPU launcher");
}

TEST_F(ConfigFileTest, NegativeNumProcessesIsOutOfRange) {
  const std::string path = write("neg.yaml", "num_processes: -1\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path),
      InvalidArgument,
      path +
          ":1: key 'num_processes' is out of range, got '-1'. Valid "
          "values: an integer from 1 up.");
  const std::string port = write("port.json", "{\"main_process_port\": 70000}");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(port), InvalidArgument, "an integer from 0 to 65535");
}

TEST_F(ConfigFileTest, MissingFileIsAnIoErrorNamingIt) {
  const std::string path = (dir_ / "missing.yaml").string();
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path), IoError, path + ": no such config file");
}

TEST_F(ConfigFileTest, YamlSyntaxErrorGivesItsLine) {
  const std::string path =
      write("syntax.yaml", "num_processes: 1\nmixed_precision: [bf16\n");
  AMPKIT_EXPECT_THROWS_WITH(load_config(path), IoError, path + ":");
  AMPKIT_EXPECT_THROWS_WITH(load_config(path), IoError, "YAML syntax error");
  const std::string json = write("syntax.json", "{\n  \"a\": 1,\n  ]\n}\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(json), IoError, json + ":3: JSON syntax error");
}

TEST_F(ConfigFileTest, NotAMappingIsRefused) {
  const std::string path = write("list.yaml", "- bf16\n- fp16\n");
  AMPKIT_EXPECT_THROWS_WITH(
      load_config(path), InvalidArgument, "must be a mapping");
}

TEST(ConfigValuesTest, CarryTheAcceleratorsSettingsWithTheirOrigin) {
  LaunchConfig config;
  config.mixed_precision = Precision::bf16;
  config.gradient_accumulation_steps = 4;
  config.use_cpu = true;
  ConfigValues values = to_config_values(config, "/tmp/c.yaml");
  EXPECT_EQ(values.origin, "/tmp/c.yaml");
  EXPECT_EQ(values.mixed_precision, Precision::bf16);
  EXPECT_EQ(values.gradient_accumulation_steps, 4);
  EXPECT_EQ(values.use_cpu, true);
  EXPECT_FALSE(values.log_with.has_value());
  config.log_with = "jsonl";
  EXPECT_EQ(to_config_values(config, "x").log_with, "jsonl");
}

// Sets or unsets an environment variable for one test, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultConfigPathTest, HonoursAmpkitConfigFileThenXdgCacheHome) {
  {
    ScopedEnv file("AMPKIT_CONFIG_FILE", "/etc/my.yaml");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_config_path(), "/etc/my.yaml");
  }
  {
    ScopedEnv file("AMPKIT_CONFIG_FILE", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_config_path(), "/xdg/ampkit/default_config.yaml");
  }
  {
    ScopedEnv file("AMPKIT_CONFIG_FILE", "");
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", "/home/u");
    EXPECT_EQ(
        default_config_path(), "/home/u/.cache/ampkit/default_config.yaml");
  }
}

// An accelerate user's answers count: with no ampkit file, launch, env and
// doctor read $HF_HOME/accelerate/default_config.yaml (accelerate's path).
TEST(DefaultConfigPathTest, ReadsAccelerateDefaultConfigWhenAmpkitHasNone) {
  const fs::path dir =
      fs::temp_directory_path() / ("ampkit_cfg_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ScopedEnv file("AMPKIT_CONFIG_FILE", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", (dir / "xdg").c_str());
  ScopedEnv hf("HF_HOME", nullptr);
  const std::string ours = (dir / "xdg/ampkit/default_config.yaml").string();
  const std::string theirs =
      (dir / "xdg/huggingface/accelerate/default_config.yaml").string();
  EXPECT_EQ(accelerate_config_path(), theirs);
  EXPECT_EQ(config_path_to_read(), ours);  // neither exists: ampkit's
  fs::create_directories(fs::path(theirs).parent_path());
  std::ofstream(theirs) << "mixed_precision: bf16\n";
  EXPECT_EQ(config_path_to_read(), theirs);
  EXPECT_EQ(
      load_config(config_path_to_read()).mixed_precision, Precision::bf16);
  EXPECT_EQ(default_config_path(), ours);  // ampkit config still writes its own
  fs::create_directories(fs::path(ours).parent_path());
  std::ofstream(ours) << "mixed_precision: fp16\n";
  EXPECT_EQ(config_path_to_read(), ours);  // ampkit's own file comes first
  {
    ScopedEnv hf_home("HF_HOME", (dir / "hf").c_str());
    EXPECT_EQ(
        accelerate_config_path(),
        (dir / "hf/accelerate/default_config.yaml").string());
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ampkit::config
