// Tests of `ampkit config`'s questionnaire: answers piped line by line,
// defaults, re-asking, menus and end of input.
#include <sstream>
#include <string>

#include "ampkit/config/config.h"
#include "ampkit/error.h"
#include "test_util.h"

namespace ampkit::config {
namespace {

using ::testing::HasSubstr;

// Runs the questionnaire on `answers`; the printed text goes to `printed`.
LaunchConfig answer(
    const std::string& answers, std::string* printed = nullptr) {
  std::istringstream in(answers);
  std::ostringstream out;
  LaunchConfig config = run_questionnaire(in, out);
  if (printed != nullptr) {
    *printed = out.str();
  }
  return config;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

TEST(QuestionnaireTest, EmptyAnswersGiveTheDefaultConfig) {
  // Compute environment, machine type, mixed precision, accumulation.
  const LaunchConfig config = answer("\n\n\n\n");
  const LaunchConfig defaults;
  EXPECT_EQ(config.compute_environment, defaults.compute_environment);
  EXPECT_EQ(config.distributed_type, defaults.distributed_type);
  EXPECT_EQ(config.mixed_precision, defaults.mixed_precision);
  EXPECT_EQ(config.num_processes, defaults.num_processes);
  EXPECT_EQ(config.num_machines, defaults.num_machines);
  EXPECT_EQ(config.machine_rank, defaults.machine_rank);
  EXPECT_EQ(config.main_process_ip, defaults.main_process_ip);
  EXPECT_EQ(config.main_process_port, defaults.main_process_port);
  EXPECT_EQ(config.use_cpu, defaults.use_cpu);
  EXPECT_EQ(config.gpu_ids, defaults.gpu_ids);
  EXPECT_EQ(config.debug, defaults.debug);
  EXPECT_EQ(config.same_network, defaults.same_network);
  EXPECT_EQ(config.rdzv_backend, defaults.rdzv_backend);
  EXPECT_EQ(
      config.gradient_accumulation_steps, defaults.gradient_accumulation_steps);
}

TEST(QuestionnaireTest, MultiGpuOnTwoMachinesFillsEveryField) {
  const LaunchConfig config = answer(
      "This machine\n"  // compute environment
      "multi-GPU\n"     // machine type
      "2\n"             // machines
      "1\n"             // rank of this machine
      "10.0.0.1\n"      // main process IP
      "\n"              // port [29500]
      "n\n"             // same network
      "c10d\n"          // rendezvous backend
      "YES\n"           // debug
      "8\n"             // processes over both machines
      "no\n"            // DeepSpeed (ZeRO)
      "no\n"            // FullyShardedDataParallel
      "0, 1,2,3\n"      // GPU ids
      "bf16\n"          // mixed precision
      "4\n");           // gradient accumulation
  EXPECT_EQ(config.compute_environment, "LOCAL_MACHINE");
  EXPECT_EQ(config.distributed_type, "MULTI_GPU");
  EXPECT_EQ(config.num_machines, 2);
  EXPECT_EQ(config.machine_rank, 1);
  EXPECT_EQ(config.main_process_ip, "10.0.0.1");
  EXPECT_EQ(config.main_process_port, 29500);
  EXPECT_FALSE(config.same_network);
  EXPECT_EQ(config.rdzv_backend, "c10d");
  EXPECT_TRUE(config.debug);
  EXPECT_EQ(config.num_processes, 8);
  EXPECT_EQ(config.gpu_ids, "0,1,2,3");
  EXPECT_FALSE(config.use_cpu);
  EXPECT_EQ(config.mixed_precision, Precision::bf16);
  EXPECT_EQ(config.gradient_accumulation_steps, 4);
}

TEST(QuestionnaireTest, InvalidAnswerIsReaskedWithTheValidValues) {
  std::string printed;
  const LaunchConfig config = answer("\n\nfp64\nfp16\n0\n\n", &printed);
  EXPECT_EQ(config.mixed_precision, Precision::fp16);
  EXPECT_THAT(printed, HasSubstr("Valid values: no, fp16, bf16, auto"));
  EXPECT_EQ(count(printed, "Do you wish to use mixed precision?"), 2u);
  EXPECT_THAT(printed, HasSubstr("Please enter an integer >= 1"));
  EXPECT_EQ(count(printed, "How many gradient accumulation steps"), 2u);
  EXPECT_EQ(config.gradient_accumulation_steps, 1);
}

TEST(QuestionnaireTest, MenuTakesANumberOrAName) {
  EXPECT_EQ(answer("0\n1\n\n\n\n\n\n\n").distributed_type, "MULTI_CPU");
  EXPECT_EQ(answer("0\nMulti-CPU\n\n\n\n\n\n\n").distributed_type, "MULTI_CPU");
  EXPECT_EQ(answer("0\nmulti_cpu\n\n\n\n\n\n\n").distributed_type, "MULTI_CPU");
  EXPECT_EQ(answer("0\n0\n2\n\n").mixed_precision, Precision::bf16);
  EXPECT_EQ(answer("0\n0\nAUTO\n\n").mixed_precision, Precision::automatic);
  EXPECT_EQ(answer("LOCAL_MACHINE\nno\n\n\n").distributed_type, "NO");
}

TEST(QuestionnaireTest, MultiCpuDefaultsToTwoProcessesOnCpu) {
  // Type, machines, debug, processes, DeepSpeed, precision, accumulation.
  const LaunchConfig config = answer("0\n1\n\n\n\n\n\n\n");
  EXPECT_EQ(config.num_processes, 2);
  EXPECT_TRUE(config.use_cpu);
  EXPECT_EQ(config.gpu_ids, "all");
}

TEST(QuestionnaireTest, OtherComputeEnvironmentsAreRefusedAsUnsupported) {
  std::string printed;
  answer("AWS\n0\n\n\n\n", &printed);
  EXPECT_THAT(printed, HasSubstr("Valid values: This machine"));
  EXPECT_THAT(printed, HasSubstr("not supported"));
}

TEST(QuestionnaireTest, RefusesOneProcessForMultiGpuOnOneMachine) {
  std::string printed;
  const LaunchConfig config = answer("0\n2\n\n\n1\n2\n\n\n\n\n\n", &printed);
  EXPECT_THAT(printed, HasSubstr("Please enter an integer >= 2"));
  EXPECT_EQ(config.num_processes, 2);
}

TEST(QuestionnaireTest, MachineRankMustBeBelowTheNumberOfMachines) {
  std::string printed;
  const LaunchConfig config =
      answer("0\n1\n3\n3\n2\nhost\n\n\n\n\n\n\n\n", &printed);
  EXPECT_THAT(printed, HasSubstr("Please enter an integer from 0 to 2"));
  EXPECT_EQ(config.machine_rank, 2);
  EXPECT_EQ(config.main_process_ip, "host");
  EXPECT_TRUE(config.same_network);
  EXPECT_EQ(config.num_processes, 3);
}

TEST(QuestionnaireTest, EndOfInputNamesTheUnansweredQuestion) {
  AMPKIT_EXPECT_THROWS_WITH(
      answer("0\n0\n"), UsageError, "Do you wish to use mixed precision?");
  AMPKIT_EXPECT_THROWS_WITH(answer("0\n0\n"), UsageError, "piped one per line");
  AMPKIT_EXPECT_THROWS_WITH(
      answer(""), UsageError, "In which compute environment are you running?");
}

TEST(QuestionnaireTest, LastAnswerWithoutNewlineIsAccepted) {
  EXPECT_EQ(answer("0\n0\n\n3").gradient_accumulation_steps, 3);
}

TEST(QuestionnaireTest, PromptsShowTheDefaultsInBrackets) {
  std::string printed;
  answer("0\nmulti-GPU\n2\n\n10.0.0.1\n\n\n\n\n\n\n\n\n\n", &printed);
  EXPECT_THAT(printed, HasSubstr("[No distributed training]: "));
  EXPECT_THAT(printed, HasSubstr("multi-node training)? [1]: "));
  EXPECT_THAT(printed, HasSubstr("rank of this machine? [0]: "));
  EXPECT_THAT(printed, HasSubstr("main process? [29500]: "));
  EXPECT_THAT(printed, HasSubstr("different network hosts [yes]: "));
  EXPECT_THAT(printed, HasSubstr("will be slower. [no]: "));
  EXPECT_THAT(printed, HasSubstr("over all machines)? [2]: "));
  EXPECT_THAT(printed, HasSubstr("comma-separated list? [all]: "));
  EXPECT_THAT(printed, HasSubstr("Enter a number or a name [no]: "));
  EXPECT_THAT(printed, HasSubstr("in your script? [1]: "));
}

// accelerate's DeepSpeed questions, for ampkit's ZeRO: the file says
// DEEPSPEED with a deepspeed_config accelerate writes, and reads back.
TEST(QuestionnaireTest, DeepSpeedAnswersWriteAZeroConfigThatReadsBack) {
  std::string printed;
  const LaunchConfig config = answer(
      "0\n"    // compute environment
      "1\n"    // multi-CPU
      "\n"     // machines
      "\n"     // debug
      "2\n"    // processes
      "yes\n"  // DeepSpeed
      "4\n"    // no stage 4: asked again
      "1\n"    // stage 1
      "y\n"    // gradient clipping
      "0.5\n"  // its value
      "\n"     // precision
      "2\n",   // accumulation
      &printed);
  EXPECT_THAT(printed, HasSubstr("integer from 0 to 3"));
  EXPECT_EQ(config.distributed_type, "DEEPSPEED");
  EXPECT_EQ(config.zero_stage, 1);
  EXPECT_EQ(config.gradient_clipping, 0.5);
  EXPECT_TRUE(config.use_cpu);
  const std::string path = ::testing::TempDir() + "/deepspeed_config.yaml";
  save_config(config, path);
  const LaunchConfig back = load_config(path);
  EXPECT_EQ(back.distributed_type, "DEEPSPEED");
  EXPECT_EQ(back.zero_stage, 1);
  EXPECT_EQ(back.gradient_clipping, 0.5);
  EXPECT_EQ(back.gradient_accumulation_steps, 2);
  const ConfigValues values = to_config_values(back, path);
  EXPECT_EQ(values.zero_stage, std::optional<int64_t>(1));
  EXPECT_EQ(values.gradient_clipping, std::optional<double>(0.5));
}

// accelerate's FSDP questions (multi-GPU): the file says FSDP with the
// fsdp_config accelerate writes, and reads back as launch's variables.
TEST(QuestionnaireTest, FsdpAnswersWriteAnFsdpConfigThatReadsBack) {
  const LaunchConfig config = answer(
      "0\n"              // compute environment
      "multi-GPU\n"      // machine type
      "\n"               // machines
      "\n"               // debug
      "2\n"              // processes
      "no\n"             // DeepSpeed
      "yes\n"            // FullyShardedDataParallel
      "SHARD_GRAD_OP\n"  // sharding strategy
      "0\n"              // TRANSFORMER_BASED_WRAP
      "Block\n"          // the type to wrap
      "1\n"              // BACKWARD_POST
      "\n"               // SHARDED_STATE_DICT (the default)
      "yes\n"            // forward prefetch
      "yes\n"            // activation checkpointing
      "\n"               // GPU ids
      "bf16\n"           // precision
      "\n");             // accumulation
  EXPECT_EQ(config.distributed_type, "FSDP");
  const std::string path = ::testing::TempDir() + "/fsdp_config.yaml";
  save_config(config, path);
  const LaunchConfig back = load_config(path);
  EXPECT_EQ(back.distributed_type, "FSDP");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"ACCELERATE_USE_FSDP", "true"},
      {"FSDP_ACTIVATION_CHECKPOINTING", "true"},
      {"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"},
      {"FSDP_TRANSFORMER_CLS_TO_WRAP", "Block"},
      {"FSDP_BACKWARD_PREFETCH", "BACKWARD_POST"},
      {"FSDP_FORWARD_PREFETCH", "true"},
      {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"},
      {"FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT"}};
  EXPECT_EQ(back.fsdp_env, want);
  EXPECT_EQ(to_config_values(back, path).fsdp_env, want);
}

}  // namespace
}  // namespace ampkit::config
