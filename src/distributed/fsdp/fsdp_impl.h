// FullyShardedModel's private state, shared by the files of
// src/distributed/fsdp/ (one per FSDP noun, as FSDP2's _fully_shard/).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ampkit/distributed/fsdp.h"
#include "ampkit/distributed/process_group.h"
#include "distributed/fsdp/flat_param.h"
#include "distributed/fsdp/unit.h"

namespace ampkit::dist {

using detail::FlatParam;
using detail::FsdpUnit;

struct FullyShardedModel::Impl {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<ProcessGroup> global;  // every process
  // The processes a unit is sharded across (HYBRID_SHARD: this machine's;
  // nullptr when that is this process alone), and under HYBRID_SHARD the
  // processes elsewhere that hold the same shard (nullptr otherwise).
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<ProcessGroup> replicas;
  FsdpOptions options;
  int64_t rank = 0;                              // in `group`
  int64_t world = 1;                             // `group`'s size
  std::vector<std::shared_ptr<FsdpUnit>> units;  // root first
  std::vector<torch::Tensor> shards;
  int64_t gathered_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  bool summoned = false;  // gather_all until release_all: nothing freed
  bool sync = true;       // the current micro-step's backward reduces
  // The units the forward with gradients since before_forward entered, in
  // order, and those of the forward before it (what prefetch follows).
  std::vector<FsdpUnit*> order_now;
  std::vector<FsdpUnit*> order;
  // Backward's place in order_now: units run backward in reverse.
  size_t backward_cursor = 0;
  std::vector<torch::Tensor> optimizer_params;  // take_over's, in order

  bool sharded() const {
    return options.strategy() != ShardingStrategy::no_shard;
  }
  int64_t parts() const {
    return sharded() ? world : 1;
  }
  /// A flat buffer of `params` holding `values` (full, the same on every
  /// process), sharded.
  FlatParam make_flat(
      const std::vector<std::string>& names,
      const std::vector<torch::Tensor>& params,
      const std::vector<torch::Tensor>& values);
  void gather(FsdpUnit& u);
  void gather(FlatParam& f);
  /// Every process's `part` of f (the shard, or its gradient) gathered
  /// into a temporary flat tensor of `part`'s dtype (no gather when
  /// nothing is sharded).
  torch::Tensor gathered_copy(const FlatParam& f, const torch::Tensor& part);
  /// Allocates f.full and issues the all-gather of the shards into it
  /// (waited for by gather).
  void start_gather(FlatParam& f);
  /// Issues the gathers of the unit `step` places from `at` in
  /// `order_now` (prefetch), where there is one.
  void prefetch(size_t at, int step);
  void release(FsdpUnit& u);
  void release(FlatParam& f);
  /// Reduce-scatters `grads` (one per parameter of f, undefined for none)
  /// into f's shard gradient.
  /// The reduce-scatter is issued and runs while backward goes on; it is
  /// finished by finish_reduces.
  void reduce(FlatParam& f, const std::vector<torch::Tensor>& grads);
  void reduce(FsdpUnit& u);  // from the parameters' .grad()
  /// Waits for the reduce-scatters issued so far (in their order) and adds
  /// each part into its shard's gradient; called before the next unit's
  /// are issued, so that one unit's full gradients at most are in flight.
  void finish_reduces();
  std::vector<FlatParam*> reducing;
  void collect_shards();
  /// HYBRID_SHARD: `group` becomes this machine's processes, `replicas`
  /// the processes with this one's local rank on every machine.
  void split_hybrid();
};

}  // namespace ampkit::dist
