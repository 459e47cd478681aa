#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "ampkit/distributed/env.h"
#include "ampkit/error.h"

namespace {

using ampkit::dist::detect_env;
using ampkit::dist::Launcher;
using ::testing::AllOf;
using ::testing::HasSubstr;

ampkit::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) {
      return std::nullopt;
    }
    return it->second;
  };
}

TEST(DistEnvTest, NoLauncherIsOneProcess) {
  const auto e = detect_env(env_of({}));
  EXPECT_EQ(e.launcher, Launcher::none);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(DistEnvTest, TorchrunVariables) {
  const auto e = detect_env(env_of(
      {{"RANK", "3"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "10.0.0.1"},
       {"MASTER_PORT", "29500"},
       {"TORCHELASTIC_RUN_ID", "job7"}}));
  EXPECT_EQ(e.launcher, Launcher::torchrun);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.run_id, "job7");
  EXPECT_FALSE(e.single_node());
}

TEST(DistEnvTest, LoopbackOrAllProcessesLocalIsSingleNode) {
  EXPECT_TRUE(detect_env(env_of(
                             {{"RANK", "1"},
                              {"WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", "1234"}}))
                  .single_node());
  const auto e = detect_env(env_of(
      {{"RANK", "1"},
       {"WORLD_SIZE", "2"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"LOCAL_RANK", "1"},
       {"MASTER_ADDR", "node1"},
       {"MASTER_PORT", "1234"}}));
  EXPECT_TRUE(e.single_node());
}

TEST(DistEnvTest, SlurmVariables) {
  const auto e = detect_env(env_of(
      {{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_NNODES", "2"},
       {"SLURM_JOB_ID", "99"},
       {"SLURM_STEP_ID", "0"},
       {"MASTER_ADDR", "n1"},
       {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(e.launcher, Launcher::slurm);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.run_id, "99.0");
}

TEST(DistEnvTest, OpenMpiVariables) {
  const auto e = detect_env(env_of(
      {{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(e.launcher, Launcher::openmpi);
  EXPECT_EQ(e.rank, 1);
  EXPECT_TRUE(e.single_node());
}

TEST(DistEnvTest, MissingOrInconsistentVariablesAreNamedWithHowToLaunch) {
  EXPECT_THAT(
      [] {
        detect_env(env_of({{"RANK", "0"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(AllOf(
          HasSubstr("WORLD_SIZE is not set"),
          HasSubstr("ampkit launch"),
          HasSubstr("torchrun"))));
  EXPECT_THAT(
      [] {
        detect_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("RANK must be in [0, WORLD_SIZE=2), got 2")));
  EXPECT_THAT(
      [] {
        detect_env(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("RANK must be an integer, got 'x'")));
  EXPECT_THAT(
      [] {
        detect_env(
            env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("MASTER_ADDR is not set")));
  EXPECT_THAT(
      [] {
        detect_env(env_of(
            {{"RANK", "0"},
             {"WORLD_SIZE", "2"},
             {"MASTER_ADDR", "h"},
             {"MASTER_PORT", "70000"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("MASTER_PORT must be in [1, 65535], got 70000")));
  EXPECT_THAT(
      [] {
        detect_env(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("SLURM_LOCALID is not set")));
  EXPECT_THAT(
      [] {
        detect_env(env_of(
            {{"RANK", "0"},
             {"WORLD_SIZE", "2"},
             {"MASTER_ADDR", "10.1.1.1"},
             {"MASTER_PORT", "5"}}));
      },
      ::testing::ThrowsMessage<ampkit::InvalidArgument>(
          HasSubstr("LOCAL_RANK is not set in a run over several machines")));
}

}  // namespace
