// One process of the distributed tests: started by dist_test.cpp with the
// launcher's environment (RANK, WORLD_SIZE, ...), or with none for the
// single-process reference. Each scenario checks what it can itself and
// exits non-zero with a message on stderr when something is wrong.
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "accelerator/auto_precision.h"
#include "ampkit/ampkit.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  // fc1 runs through fsdp_forward: under the "fsdp" scenarios' wrap policy
  // it is a unit (its own forward otherwise).
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::relu(ampkit::dist::fsdp_forward(fc1, x)));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// The global batch of step s: the same on every process.
std::pair<torch::Tensor, torch::Tensor> global_batch(
    int64_t step, int64_t size) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto x = torch::randn({size, 8}, gen);
  auto y = x.sum(1, true).sin();
  return {x, y};
}

int fail(const std::string& message) {
  std::cerr << "dist_worker: " << message << std::endl;
  return 1;
}

#define CHECK_OR_FAIL(cond, message)     \
  do {                                   \
    if (!(cond)) {                       \
      return fail(std::string(message)); \
    }                                    \
  } while (0)

ampkit::AcceleratorOptions base_options() {
  return ampkit::AcceleratorOptions().cpu(true).quiet(true).timeout(
      std::chrono::seconds(20));
}

// The parameters' full values: under FSDP, whose parameters hold nothing
// between uses, gathered for the copy (summon_full_params). Every process
// must call it.
std::vector<torch::Tensor> full_weights(
    ampkit::Accelerator& accelerator, Net& net) {
  const auto full = accelerator.summon_full_params();
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters()) {
    params.push_back(p.detach().clone());
  }
  return params;
}

// Every process must hold the same weights; rank 0 saves them to `out`.
int same_weights_saved(
    ampkit::Accelerator& accelerator, Net& net, const std::string& out) {
  const auto params = full_weights(accelerator, net);
  for (const auto& p : params) {
    auto all = accelerator.gather(p.unsqueeze(0));
    for (int64_t r = 1; r < accelerator.num_processes(); ++r) {
      CHECK_OR_FAIL(all[r].equal(all[0]), "parameters differ between ranks");
    }
  }
  if (accelerator.is_main_process()) {
    torch::save(params, out);
  }
  accelerator.wait_for_everyone();
  return 0;
}

// The FSDP options of the "fsdp" scenarios: `strategy` by accelerate's name
// (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; DDP: no FSDP), units by size
// (SIZE_BASED_WRAP with 100 parameters: fc1, with 144, is a unit; fc2, with
// 17, is left to the root) and `state_dict` (FULL_STATE_DICT or
// SHARDED_STATE_DICT) for save_state.
std::optional<ampkit::dist::FsdpOptions> fsdp_options(
    const std::string& strategy,
    const std::string& state_dict = "FULL_STATE_DICT") {
  if (strategy == "DDP") {
    return std::nullopt;
  }
  return ampkit::dist::FsdpOptions()
      .strategy(ampkit::dist::parse_sharding_strategy(strategy))
      .min_num_params(100)
      .state_dict_type(ampkit::dist::parse_state_dict_type(state_dict));
}

// After prepare under `fsdp` (fsdp_options'): fc1 is a unit and fc2 the
// root's, and with a sharding strategy no parameter holds values between
// uses (each process keeps only its shards). Nothing to check without FSDP.
int check_fsdp_units(
    Net& net, const std::optional<ampkit::dist::FsdpOptions>& fsdp) {
  if (!fsdp) {
    return 0;
  }
  CHECK_OR_FAIL(
      ampkit::dist::detail::fsdp_unit_of(*net->fc1) != nullptr,
      "FSDP did not make fc1 (144 parameters) a unit");
  CHECK_OR_FAIL(
      ampkit::dist::detail::fsdp_unit_of(*net->fc2) == nullptr,
      "FSDP made fc2 (17 parameters) a unit instead of leaving it to the "
      "root");
  if (fsdp->strategy() != ampkit::dist::ShardingStrategy::no_shard) {
    for (const auto& p : net->named_parameters()) {
      CHECK_OR_FAIL(
          p.value().numel() == 0,
          p.key() + " holds its values between uses under " +
              ampkit::dist::to_string(fsdp->strategy()));
    }
  }
  return 0;
}

// 20 optimizer steps on a global batch of 16, split evenly over the
// processes; rank 0 saves the final parameters to `out`.
// `ddp`: plain, view (gradient_as_bucket_view) or static (static_graph).
int train(
    const std::string& out,
    int64_t accumulation,
    const std::string& precision,
    const std::string& compression,
    const std::string& ddp) {
  ampkit::Accelerator accelerator(
      base_options()
          .mixed_precision(precision)
          .gradient_accumulation_steps(accumulation)
          .gradient_compression(ampkit::parse_precision(compression))
          .gradient_as_bucket_view(ddp == "view")
          .static_graph(ddp == "static"));
  torch::manual_seed(accelerator.process_index() * 7 + 1);  // differ on purpose
  Net net;
  torch::optim::SGD sgd(
      net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t w = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  const int64_t global = 16;
  int64_t micro = 0;
  for (int64_t step = 0; step < 20; ++step) {
    for (int64_t a = 0; a < accumulation; ++a, ++micro) {
      auto [x, y] = global_batch(micro, global);
      const int64_t local = global / w;
      x = x.narrow(0, rank * local, local);
      y = y.narrow(0, rank * local, local);
      auto scope = accelerator.accumulate(model);
      auto loss = torch::mse_loss(model(x), y);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return same_weights_saved(accelerator, net, out);
}

// ZeRO against DDP: 100 AdamW steps (optimizer state matters) of `stage`
// on a global batch of 16 split over the processes, with accumulation,
// clipping to `clip` (0: none; negative: by gradient_clipping) and, with
// `inject`, loss scaling and an inf
// put into rank 1's local gradient of fc1.weight[0][0] at step 5 (rank 0's
// shard under ZeRO: only the agreed found_inf makes rank 1 skip too). Rank
// 0 saves the final parameters to `out`; every rank prints its optimizer
// state and gradient bytes at the last step. With `fsdp` (stage 0, no
// `inject`) the same training under FSDP (fsdp_options).
int zero_train(
    const std::string& out,
    int64_t stage,
    int64_t accumulation,
    const std::string& precision,
    double clip,
    bool inject,
    const std::optional<ampkit::dist::FsdpOptions>& fsdp = std::nullopt) {
  ampkit::Accelerator accelerator(
      base_options()
          .mixed_precision(precision)
          .gradient_accumulation_steps(accumulation)
          .zero_stage(stage)
          .fsdp(fsdp)
          // Buckets of about 100 bytes: DDP's all-reduce and ZeRO-2's
          // reduce-scatter run bucket by bucket during backward, some
          // buckets within one process's shard, one across the boundary.
          .bucket_cap_mb(1e-4)
          .loss_scaling(inject)
          // A negative clip: the same clipping by the option, without calls.
          .gradient_clipping(clip < 0 ? -clip : 0.0));
  torch::manual_seed(accelerator.process_index() * 7 + 1);  // differ on purpose
  Net net;
  torch::optim::AdamW adamw(
      net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  const int units = check_fsdp_units(net, fsdp);
  if (units != 0) {
    return units;
  }
  const int64_t w = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  const int64_t global = 16;
  const int64_t steps = 100;
  int64_t micro = 0;
  int64_t skipped = 0;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t a = 0; a < accumulation; ++a, ++micro) {
      auto [x, y] = global_batch(micro, global);
      const int64_t local = global / w;
      x = x.narrow(0, rank * local, local);
      y = y.narrow(0, rank * local, local);
      auto scope = accelerator.accumulate(model);
      auto loss = torch::mse_loss(model(x), y);
      std::optional<unsigned> hook;
      if (inject && step == 5 && rank == w - 1) {
        hook = net->fc1->weight.register_hook([](torch::Tensor g) {
          g = g.clone();
          g[0][0] = std::numeric_limits<float>::infinity();
          return g;
        });
      }
      accelerator.backward(loss);
      if (hook) {
        net->fc1->weight.remove_hook(*hook);
      }
      if (clip > 0) {
        accelerator.clip_grad_norm_(net->parameters(), clip);
      }
      optimizer.step();
      if (accelerator.sync_gradients()) {
        skipped += optimizer.step_was_skipped() ? 1 : 0;
        if (step == steps - 1) {
          std::cout << "rank " << rank << " state_bytes "
                    << optimizer.state_bytes() << " gradient_bytes "
                    << optimizer.gradient_bytes() << std::endl;
        }
      }
      optimizer.zero_grad();
    }
  }
  CHECK_OR_FAIL(
      skipped == (inject ? 1 : 0),
      "skipped " + std::to_string(skipped) + " steps, expected " +
          (inject ? "1 (the injected inf)" : "0"));
  return same_weights_saved(accelerator, net, out);
}

// ZeRO stage 2's reduce-scatter during backward, with one bucket per
// parameter. A parameter that only rank 0 uses comes first in flat order,
// so its bucket is the last to be issued: on rank 1 it never completes in
// backward and is issued by reduce_gradients, after the others, in the
// same order as on rank 0. After a prepared backward every gradient has
// been handed to its bucket (.grad freed); the shard's gradient is the
// average of the processes' local gradients, as without preparing.
int zero_overlap() {
  ampkit::Accelerator accelerator(base_options());
  std::shared_ptr<ampkit::dist::ProcessGroup> group(
      accelerator.process_group(), [](ampkit::dist::ProcessGroup*) {});
  const int64_t rank = accelerator.process_index();
  torch::manual_seed(3);
  Net net;
  auto extra = torch::ones({5}).requires_grad_();
  std::vector<torch::Tensor> params{extra};
  for (auto& p : net->parameters()) {
    params.push_back(p);
  }
  torch::optim::SGD sgd(params, 0.1);
  ampkit::optim::ShardedOptimizer sharded(sgd, group, 2, /*bucket_bytes=*/1);
  auto [x, y] = global_batch(rank, 8);
  auto loss_of = [&, x = x, y = y] {
    auto loss = torch::mse_loss(net->forward(x), y);
    return rank == 0 ? loss + extra.square().sum() : loss;
  };
  // The average of the local gradients, by hand, in flat order.
  loss_of().backward();
  std::vector<torch::Tensor> local;
  for (auto& p : params) {
    local.push_back(
        p.grad().defined() ? p.grad().reshape({-1})
                           : torch::zeros({p.numel()}));
  }
  auto average = torch::cat(local) / 2.0;
  group->all_reduce(average, ampkit::dist::ReduceOp::sum);
  const auto& bounds = sharded.boundaries();
  auto expected =
      average.narrow(0, bounds[rank], bounds[rank + 1] - bounds[rank]);
  auto shard_gradient = [&] {
    return sgd.param_groups()[0].params()[0].grad().clone();
  };
  sharded.reduce_gradients();  // not prepared: every bucket issued now
  auto after = shard_gradient();
  sharded.zero_grad(true);
  sharded.prepare_for_backward();
  loss_of().backward();
  int64_t still_held = 0;
  for (auto& p : params) {
    still_held += p.grad().defined() ? 1 : 0;
  }
  CHECK_OR_FAIL(
      still_held == 0,
      std::to_string(still_held) +
          " parameter(s) still hold their gradient after a prepared "
          "backward: their buckets were not issued during it");
  sharded.reduce_gradients();
  auto during = shard_gradient();
  CHECK_OR_FAIL(
      torch::allclose(after, expected, 0, 1e-7),
      "the shard's gradient is not the processes' average");
  CHECK_OR_FAIL(
      during.equal(after),
      "reducing during backward gave another shard gradient than after it");
  // A prepared backward whose reduce never comes, then zero_grad: the
  // buckets it issued are dropped and leave nothing in the shard.
  sharded.zero_grad(true);
  sharded.prepare_for_backward();
  loss_of().backward();
  sharded.zero_grad(true);
  CHECK_OR_FAIL(
      shard_gradient().abs().max().item<float>() == 0.0f,
      "zero_grad after an unreduced prepared backward left bucket sums in "
      "the shard's gradient");
  std::cout << "rank " << rank << " buckets ok" << std::endl;
  return 0;
}

// The flat collectives FSDP and ZeRO-2 use, on 3 processes (Gloo: point to
// point). ProcessGroup::reduce_scatter: each
// process gets its part of the sum of every process's tensor, summed in
// rank order, with parts of different lengths (process 1's empty); two
// issued before either is waited for, and waited for in the other order;
// the input unchanged; bf16 summed as bf16 into an fp32 output; the output
// a part of the input. Then all_gather_into, also with a reduce_scatter in
// flight.
int flat_collectives() {
  ampkit::Accelerator accelerator(base_options());
  auto& group = *accelerator.process_group();
  const int64_t w = group.size();
  const int64_t r = group.rank();
  CHECK_OR_FAIL(w == 3, "flat_collectives expects 3 processes");
  const std::vector<int64_t> bounds{0, 4, 4, 10};
  const int64_t begin = bounds[r];
  const int64_t length = bounds[r + 1] - begin;
  // Process q's tensor number k: values whose sums round.
  auto input = [](int64_t q, int64_t k, c10::ScalarType dtype) {
    return torch::arange(10, torch::kDouble)
        .mul(0.37 * static_cast<double>(k + 1))
        .add(static_cast<double>(q) * 1.91)
        .sin()
        .mul(1000.0)
        .to(dtype);
  };
  auto expected = [&](int64_t k, c10::ScalarType dtype) {
    auto sum = input(0, k, dtype);
    for (int64_t q = 1; q < w; ++q) {
      sum.add_(input(q, k, dtype));
    }
    return sum.narrow(0, begin, length);
  };
  auto a = input(r, 0, torch::kFloat);
  auto b = input(r, 1, torch::kFloat);
  auto out_a = torch::full({length}, -1.0f);
  auto out_b = torch::full({length}, -1.0f);
  auto pending_a = group.reduce_scatter_async(out_a, a, bounds);
  auto pending_b = group.reduce_scatter_async(out_b, b, bounds);
  pending_b.wait();
  pending_a.wait();
  CHECK_OR_FAIL(
      out_a.equal(expected(0, torch::kFloat)),
      "the first reduce_scatter's part is not the rank-order sum");
  CHECK_OR_FAIL(
      out_b.equal(expected(1, torch::kFloat)),
      "the second reduce_scatter's part is not the rank-order sum");
  CHECK_OR_FAIL(
      a.equal(input(r, 0, torch::kFloat)), "reduce_scatter changed its input");
  auto c = input(r, 2, torch::kBFloat16);
  auto out_c = torch::empty({length});
  group.reduce_scatter(out_c, c, bounds);
  CHECK_OR_FAIL(
      out_c.equal(expected(2, torch::kBFloat16).to(torch::kFloat)),
      "the bf16 reduce_scatter's part is not the bf16 rank-order sum");
  // In place: the output is this process's part of the input.
  auto d = input(r, 6, torch::kFloat);
  auto part_of_d = d.narrow(0, begin, length);
  group.reduce_scatter(part_of_d, d, bounds);
  CHECK_OR_FAIL(
      part_of_d.equal(expected(6, torch::kFloat)),
      "an in-place reduce_scatter's part is not the rank-order sum");
  // all_gather_into: every process's part in rank order, two in flight at
  // once, and bf16 (moved as bytes).
  auto gathered_a = torch::full({3 * w}, -1.0f);
  auto gathered_b = torch::full({3 * w}, -1.0f);
  auto gathering_a = group.all_gather_into_async(
      gathered_a, input(r, 3, torch::kFloat).narrow(0, 0, 3));
  auto gathering_b = group.all_gather_into_async(
      gathered_b, input(r, 4, torch::kFloat).narrow(0, 2, 3));
  gathering_b.wait();
  gathering_a.wait();
  // A reduce-scatter and a gather in flight at once (FSDP's prefetch
  // while a unit's gradients are reduced), the gather waited for first.
  auto e = input(r, 7, torch::kFloat);
  auto out_e = torch::empty({length});
  auto gathered_e = torch::empty({3 * w});
  auto pending_e = group.reduce_scatter_async(out_e, e, bounds);
  auto gathering_e = group.all_gather_into_async(gathered_e, e.narrow(0, 4, 3));
  gathering_e.wait();
  pending_e.wait();
  CHECK_OR_FAIL(
      out_e.equal(expected(7, torch::kFloat)),
      "a reduce_scatter with a gather in flight is not the rank-order sum");
  for (int64_t q = 0; q < w; ++q) {
    CHECK_OR_FAIL(
        gathered_e.narrow(0, 3 * q, 3)
            .equal(input(q, 7, torch::kFloat).narrow(0, 4, 3)),
        "a gather with a reduce_scatter in flight: process " +
            std::to_string(q) + "'s part is not its input");
  }
  auto gathered_c = torch::empty({3 * w}, torch::kBFloat16);
  group.all_gather_into(
      gathered_c, input(r, 5, torch::kBFloat16).narrow(0, 7, 3));
  for (int64_t q = 0; q < w; ++q) {
    CHECK_OR_FAIL(
        gathered_a.narrow(0, 3 * q, 3)
                .equal(input(q, 3, torch::kFloat).narrow(0, 0, 3)) &&
            gathered_b.narrow(0, 3 * q, 3)
                .equal(input(q, 4, torch::kFloat).narrow(0, 2, 3)) &&
            gathered_c.narrow(0, 3 * q, 3)
                .equal(input(q, 5, torch::kBFloat16).narrow(0, 7, 3)),
        "all_gather_into: process " + std::to_string(q) +
            "'s part is not its input");
  }
  std::cout << "rank " << r << " flat collectives ok" << std::endl;
  return 0;
}

// Steps [from, to) of the resume scenarios: AdamW on global batch `step`
// of 16, each process taking its part.
template <typename Model, typename Optimizer>
void resume_steps(
    ampkit::Accelerator& accelerator,
    Model& model,
    Optimizer& optimizer,
    int64_t from,
    int64_t to) {
  const int64_t w = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  for (int64_t step = from; step < to; ++step) {
    auto [x, y] = global_batch(step, 16);
    x = x.narrow(0, rank * 16 / w, 16 / w);
    y = y.narrow(0, rank * 16 / w, 16 / w);
    accelerator.backward(torch::mse_loss(model(x), y));
    optimizer.step();
    optimizer.zero_grad();
  }
}

// save_state at step 5 of 10, train on, load_state and train steps 5-10
// again: the same weights bit for bit, so the optimizer shards (AdamW's
// moments) came back exactly; save_model then writes the full weights,
// which one process loads. The checkpoint stays in DIR/zero_checkpoint_S.
// With `fsdp` (stage 0) the same under FSDP, in DIR/fsdp_checkpoint_TAG:
// each process's optimizer shard, and the model whole (FULL_STATE_DICT)
// or as each process's shards (SHARDED_STATE_DICT), which is checked.
int zero_resume(
    const std::string& dir,
    int64_t stage,
    const std::optional<ampkit::dist::FsdpOptions>& fsdp = std::nullopt,
    const std::string& tag = "") {
  ampkit::Accelerator accelerator(base_options().zero_stage(stage).fsdp(fsdp));
  torch::manual_seed(1);
  Net net;
  torch::optim::AdamW adamw(net->parameters(), 1e-2);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  const int units = check_fsdp_units(net, fsdp);
  if (units != 0) {
    return units;
  }
  const std::string kind = fsdp ? "fsdp" : "zero";
  const std::string label = fsdp ? tag : std::to_string(stage);
  const std::string checkpoint = dir + "/" + kind + "_checkpoint_" + label;
  resume_steps(accelerator, model, optimizer, 0, 5);
  accelerator.save_state(checkpoint);
  if (fsdp) {
    const std::string own = "model_rank" +
                            std::to_string(accelerator.process_index()) +
                            ".safetensors";
    const bool has_whole =
        std::ifstream(checkpoint + "/model.safetensors").good();
    const bool has_own = std::ifstream(checkpoint + "/" + own).good();
    if (fsdp->state_dict_type() ==
        ampkit::dist::StateDictType::sharded_state_dict) {
      CHECK_OR_FAIL(
          has_own && !has_whole,
          "SHARDED_STATE_DICT: the checkpoint should hold " + own +
              " and no model.safetensors");
    } else {
      CHECK_OR_FAIL(
          has_whole && !has_own,
          "FULL_STATE_DICT: the checkpoint should hold model.safetensors "
          "and no " +
              own);
    }
  }
  resume_steps(accelerator, model, optimizer, 5, 10);
  const auto first = full_weights(accelerator, net);
  accelerator.load_state(checkpoint);
  resume_steps(accelerator, model, optimizer, 5, 10);
  const auto second = full_weights(accelerator, net);
  for (size_t i = 0; i < first.size(); ++i) {
    CHECK_OR_FAIL(
        first[i].equal(second[i]),
        "parameter " + std::to_string(i) + " differs after resuming");
  }
  std::ifstream manifest(checkpoint + "/manifest.json");
  std::string text(std::istreambuf_iterator<char>(manifest), {});
  std::cout << "manifest "
            << (text.find("optimizer_partitions") != std::string::npos
                    ? "has"
                    : "lacks")
            << " optimizer_partitions" << std::endl;
  // save_model writes the full weights, which one process loads.
  const std::string model_dir = dir + "/" + kind + "_model_" + label;
  accelerator.save_model(model, model_dir);
  if (accelerator.is_main_process()) {
    Net single;
    ampkit::checkpoint::load_model(*single, model_dir);
    const auto loaded = single->parameters();
    for (size_t i = 0; i < second.size(); ++i) {
      CHECK_OR_FAIL(
          loaded[i].equal(second[i]),
          "save_model's parameter " + std::to_string(i) +
              " differs from the trained one");
    }
  }
  return 0;
}

// load_state of the checkpoint zero_resume wrote at step 5 on another
// number of processes (under FSDP each buffer's saved shards joined and
// split again for this count), then steps 5 to 10; rank 0 saves the final
// weights to `out`.
int resume_on(
    const std::string& out,
    const std::string& checkpoint,
    const std::optional<ampkit::dist::FsdpOptions>& fsdp) {
  ampkit::Accelerator accelerator(base_options().fsdp(fsdp));
  torch::manual_seed(2);  // not the saving run's: the weights are loaded
  Net net;
  torch::optim::AdamW adamw(net->parameters(), 1e-2);
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  const int units = check_fsdp_units(net, fsdp);
  if (units != 0) {
    return units;
  }
  const auto fresh = full_weights(accelerator, net);
  accelerator.load_state(checkpoint);
  CHECK_OR_FAIL(
      accelerator.optimizer_steps() == 5,
      "resumed at optimizer step " +
          std::to_string(accelerator.optimizer_steps()) + ", not 5");
  const auto loaded = full_weights(accelerator, net);
  for (size_t i = 0; i < loaded.size(); ++i) {
    CHECK_OR_FAIL(
        !loaded[i].equal(fresh[i]),
        "load_state left parameter " + std::to_string(i) + " as it was");
  }
  resume_steps(accelerator, model, optimizer, 5, 10);
  return same_weights_saved(accelerator, net, out);
}

// A dataset of its own indices.
struct Indices
    : torch::data::datasets::Dataset<Indices, torch::data::Example<>> {
  explicit Indices(size_t n) : n(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor({static_cast<int64_t>(i)}), torch::tensor(0)};
  }
  torch::optional<size_t> size() const override {
    return n;
  }
  size_t n;
};

// 10 samples, batch 3 on 2 processes: the last step is padded with two
// repeats, which gather_for_metrics drops.
int metrics() {
  ampkit::Accelerator accelerator(base_options());
  auto loader = accelerator.prepare_data_loader(
      Indices(10).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(3),
      ampkit::data::ShardedSamplerOptions().shuffle(false));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<torch::Tensor> kept, all;
    for (auto& batch : loader) {
      kept.push_back(accelerator.gather_for_metrics(batch.data));
      all.push_back(accelerator.gather(batch.data));
    }
    auto k = torch::cat(kept).flatten();
    CHECK_OR_FAIL(
        k.equal(torch::arange(10)),
        "gather_for_metrics kept duplicates or lost samples");
    CHECK_OR_FAIL(
        torch::cat(all).numel() == 12, "gather should keep the padded 12");
  }
  accelerator.print("metrics ok");
  return 0;
}

// A stream of the numbers [first, first + n) in batches (data [b, 1],
// target [b]), unsized; an empty batch ends it. Stateful: reset() starts
// over, get_batch returns nullopt at the end.
class Numbers : public torch::data::datasets::
                    StreamDataset<Numbers, torch::data::Example<>> {
 public:
  Numbers(int64_t first, int64_t n) : first_(first), n_(n) {}
  torch::data::Example<> get_batch(size_t size) override {
    const int64_t b = std::min<int64_t>(static_cast<int64_t>(size), n_ - next_);
    if (b <= 0) {
      return {};
    }
    auto x = torch::arange(first_ + next_, first_ + next_ + b, torch::kFloat);
    next_ += b;
    return {x.unsqueeze(1), x};
  }
  torch::optional<size_t> size() const override {
    return torch::nullopt;
  }

 private:
  int64_t first_, n_, next_ = 0;
};

class Chunks : public torch::data::datasets::
                   StatefulDataset<Chunks, torch::data::Example<>> {
 public:
  explicit Chunks(int64_t n) : numbers_(0, n), n_(n) {}
  torch::optional<torch::data::Example<>> get_batch(size_t size) override {
    auto batch = numbers_.get_batch(size);
    if (!batch.data.defined()) {
      return torch::nullopt;
    }
    return batch;
  }
  void reset() override {
    numbers_ = Numbers(0, n_);
  }
  torch::optional<size_t> size() const override {
    return torch::nullopt;
  }
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}

 private:
  Numbers numbers_;
  int64_t n_;
};

// What one pass over a stream gave this process: the first number of each
// batch and the batches' sizes.
template <typename Loader>
std::vector<std::pair<int64_t, int64_t>> pass(Loader& loader) {
  std::vector<std::pair<int64_t, int64_t>> seen;
  for (auto& batch : loader) {
    seen.emplace_back(
        batch.target[0].template item<int64_t>(), batch.target.size(0));
  }
  return seen;
}

std::string str(const std::vector<std::pair<int64_t, int64_t>>& v) {
  std::string s;
  for (const auto& [first, size] : v) {
    s += " " + std::to_string(first) + "+" + std::to_string(size);
  }
  return s;
}

// Streams over W processes (2 or 3), 23 numbers in batches of 3 (8 batches,
// the last of 2): each process trains on its stride, every pass ends at
// the same step on every process, and the batches some processes had at
// the end are counted; with per_process streams of different lengths the
// shortest decides; a StatefulDataset starts over each epoch; the last
// batch of a pass synchronises an accumulation window; DDP trains on it.
int streams() {
  ampkit::Accelerator accelerator(
      base_options().gradient_accumulation_steps(3));
  const int64_t w = accelerator.num_processes();
  const int64_t r = accelerator.process_index();
  constexpr int64_t kBatches = 8;  // ceil(23 / 3)
  const int64_t steps = kBatches / w;
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t batch = k * w + r;
    want.emplace_back(batch * 3, batch == kBatches - 1 ? 2 : 3);
  }
  {
    auto loader = accelerator.prepare_data_loader(
        Numbers(0, 23), torch::data::DataLoaderOptions(3));
    const auto seen = pass(loader);
    CHECK_OR_FAIL(
        seen == want, "stride: got" + str(seen) + ", want" + str(want));
    const auto& end = loader.loader().last_end();
    CHECK_OR_FAIL(
        end.steps == steps && end.dropped == kBatches % w,
        "stride: the pass ended after " + std::to_string(end.steps) +
            " steps with " + std::to_string(end.dropped) + " dropped");
    // A StreamDataset is not restarted: the next pass finds it at its end.
    CHECK_OR_FAIL(pass(loader).empty(), "a used-up stream gave batches");
  }
  {
    auto loader = accelerator.prepare_data_loader(
        Chunks(23), torch::data::DataLoaderOptions(3));
    for (int epoch = 0; epoch < 2; ++epoch) {
      const auto seen = pass(loader);
      CHECK_OR_FAIL(
          seen == want,
          "ChunkDataset-like, epoch " + std::to_string(epoch) + ": got" +
              str(seen) + ", want" + str(want));
    }
  }
  {
    // Process r's own stream has 10 + 7r numbers: ceil(n / 3) batches.
    auto loader = accelerator.prepare_data_loader(
        Numbers(1000 * r, 10 + 7 * r),
        torch::data::DataLoaderOptions(3),
        ampkit::data::StreamSharding::per_process);
    const auto seen = pass(loader);
    CHECK_OR_FAIL(
        seen.size() == 4 && seen.back().first == 1000 * r + 9,
        "per_process: got" + str(seen) + ", want 4 batches");
    CHECK_OR_FAIL(
        loader.loader().last_end().dropped == w - 1,
        "per_process: " + std::to_string(loader.loader().last_end().dropped) +
            " dropped, want " + std::to_string(w - 1));
  }
  {
    // Training: DDP's all-reduces and the stream's counts interleave; the
    // window of 3 is cut short by the end of the pass, which synchronises.
    torch::manual_seed(0);
    torch::nn::Linear net(1, 1);
    torch::optim::SGD sgd(net->parameters(), 0.001);
    auto [model, optimizer] = accelerator.prepare(net, sgd);
    auto loader = accelerator.prepare_data_loader(
        Numbers(0, 23), torch::data::DataLoaderOptions(3));
    std::string syncs;
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(
          (model(batch.data).squeeze(1) - batch.target).pow(2).mean());
      syncs += accelerator.sync_gradients() ? "s" : ".";
      optimizer.step();
      optimizer.zero_grad();
    }
    const std::string want_syncs = w == 2 ? "..ss" : ".s";
    CHECK_OR_FAIL(
        syncs == want_syncs,
        "synchronised steps " + syncs + ", want " + want_syncs);
    for (auto& p : net->parameters()) {
      auto all = accelerator.gather(p.detach().reshape({1, -1}));
      for (int64_t i = 1; i < w; ++i) {
        CHECK_OR_FAIL(all[i].equal(all[0]), "parameters differ between ranks");
      }
    }
  }
  accelerator.print("streams ok");
  return 0;
}

// mixed_precision auto in a group: only rank 0 times the model, every
// rank trains in its choice (here each rank's injected timings disagree).
int auto_agree() {
  const char* rank = std::getenv("RANK");
  const bool first = rank != nullptr && std::string(rank) == "0";
  ampkit::detail::set_auto_probe_override(ampkit::detail::AutoProbeOverride{
      {ampkit::Precision::no, ampkit::Precision::bf16},
      [first](ampkit::Precision p) {
        return p == ampkit::Precision::bf16 ? (first ? 0.5 : 2.0) : 1.0;
      }});
  ampkit::Accelerator accelerator(base_options().mixed_precision("auto"));
  torch::manual_seed(0);
  torch::nn::Linear net(4, 2);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (int step = 0; step < 2; ++step) {
    accelerator.backward(model(torch::ones({2, 4})).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  CHECK_OR_FAIL(
      accelerator.mixed_precision() == ampkit::Precision::bf16,
      "this rank trains in " +
          ampkit::to_string(accelerator.mixed_precision()) +
          ", not in rank 0's choice bf16");
  accelerator.print("auto agree ok");
  return 0;
}

// Collectives over nested containers (accelerate's recursively_apply):
// gather_for_metrics on a (predictions, references) tuple drops the padding
// from both; reduce and gather over a map and a vector keep the structure.
int nested_collectives() {
  ampkit::Accelerator accelerator(base_options());
  const auto r = static_cast<float>(accelerator.process_index());
  auto loader = accelerator.prepare_data_loader(
      Indices(10).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(3),
      ampkit::data::ShardedSamplerOptions().shuffle(false));
  std::vector<torch::Tensor> predictions, references;
  for (auto& batch : loader) {
    auto [p, q] = accelerator.gather_for_metrics(
        std::make_tuple(batch.data * 2, batch.data));
    predictions.push_back(p);
    references.push_back(q);
  }
  CHECK_OR_FAIL(
      torch::cat(references).flatten().equal(torch::arange(10)) &&
          torch::cat(predictions).flatten().equal(torch::arange(10) * 2),
      "gather_for_metrics on a tuple kept padding or lost samples");
  std::map<std::string, torch::Tensor> sums{
      {"a", torch::tensor({r + 1})}, {"b", torch::tensor({10 * (r + 1)})}};
  sums = accelerator.reduce(sums);
  CHECK_OR_FAIL(
      sums["a"].item<float>() == 3 && sums["b"].item<float>() == 30,
      "reduce over a map");
  const auto gathered = accelerator.gather(
      std::vector<torch::Tensor>{torch::full({1}, r), torch::full({2}, r)});
  CHECK_OR_FAIL(
      gathered.size() == 2 && gathered[0].numel() == 2 &&
          gathered[1].numel() == 4 && gathered[1][3].item<float>() == 1,
      "gather over a vector");
  // gather_object / broadcast_object_list: any c10::IValue, pickled.
  const int64_t rank = accelerator.process_index();
  const auto names =
      accelerator.gather_object(std::string(rank == 0 ? "zero" : "one!"));
  CHECK_OR_FAIL(
      names == std::vector<std::string>({"zero", "one!"}),
      "gather_object of strings of different lengths");
  const auto numbers =
      accelerator.gather_object(std::vector<int64_t>(rank + 1, rank + 10));
  CHECK_OR_FAIL(
      numbers == std::vector<int64_t>({10, 11, 11}),
      "gather_object of vectors concatenates them in process order");
  std::vector<std::string> list{"from", "rank", std::to_string(rank)};
  accelerator.broadcast_object_list(list, 1);
  CHECK_OR_FAIL(
      list == std::vector<std::string>({"from", "rank", "1"}),
      "broadcast_object_list from process 1");
  return 0;
}

// accelerate's LocalSGD: between averages the processes step on their own
// gradients (their parameters drift apart); every local_sgd_steps-th step
// and the end of the scope average them, so they agree again.
int local_sgd() {
  ampkit::Accelerator accelerator(base_options());
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.05);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t r = accelerator.process_index();
  auto same_everywhere = [&] {
    auto w = accelerator.gather(net->fc1->weight.detach().unsqueeze(0));
    return w[0].equal(w[1]);
  };
  auto step = [&, &model = model, &optimizer = optimizer](int64_t i) {
    auto [x, y] = global_batch(i, 8);
    accelerator.backward(
        torch::mse_loss(model(x.narrow(0, r * 4, 4)), y.narrow(0, r * 4, 4)));
    optimizer.step();
    optimizer.zero_grad();
  };
  {
    ampkit::LocalSGD local(accelerator, model, 3);
    for (int64_t i = 1; i <= 7; ++i) {
      step(i);
      local.step();
      const bool averaged = i % 3 == 0;
      CHECK_OR_FAIL(
          same_everywhere() == averaged,
          "after local step " + std::to_string(i) + " the parameters " +
              (averaged ? "differ (no average)" : "agree (gradients synced)"));
    }
    CHECK_OR_FAIL(local.num_steps() == 7, "LocalSGD counted its steps");
  }
  CHECK_OR_FAIL(same_everywhere(), "leaving LocalSGD did not average");
  // The average is the mean of the processes' parameters.
  torch::Tensor drifted;
  {
    ampkit::LocalSGD local(accelerator, model, 100);
    step(8);
    drifted = accelerator.gather(net->fc1->weight.detach().unsqueeze(0));
  }
  CHECK_OR_FAIL(
      !drifted[0].equal(drifted[1]) &&
          torch::allclose(
              net->fc1->weight, (drifted[0] + drifted[1]) / 2, 1e-6, 1e-7),
      "LocalSGD's average is not the mean over processes");
  return 0;
}

// With accumulation, micro-steps keep local gradients (no all-reduce);
// the synchronising step averages them.
int micro_steps() {
  ampkit::Accelerator accelerator(
      base_options().gradient_accumulation_steps(2));
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t r = accelerator.process_index();
  for (int64_t micro = 0; micro < 2; ++micro) {
    auto [x, y] = global_batch(micro, 8);
    x = x.narrow(0, r * 4, 4);
    y = y.narrow(0, r * 4, 4);
    auto scope = accelerator.accumulate(model);
    accelerator.backward(torch::mse_loss(model(x), y));
    auto g = accelerator.gather(net->fc1->weight.grad().unsqueeze(0));
    if (micro == 0) {
      CHECK_OR_FAIL(
          !accelerator.sync_gradients() && !g[0].equal(g[1]),
          "a micro-step all-reduced the gradients");
    } else {
      CHECK_OR_FAIL(
          accelerator.sync_gradients() && g[0].equal(g[1]),
          "the synchronising step did not average the gradients");
    }
  }
  return 0;
}

// accelerate's no_sync(model): a backward inside keeps local gradients
// (accumulate() said this step synchronises); the next backward outside
// averages the sum. set_seed(device_specific) gives each process its own
// stream.
int no_sync() {
  ampkit::Accelerator accelerator(base_options());
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t r = accelerator.process_index();
  auto [x, y] = global_batch(0, 8);
  x = x.narrow(0, r * 4, 4);
  y = y.narrow(0, r * 4, 4);
  {
    auto scope = accelerator.no_sync(model);
    accelerator.backward(torch::mse_loss(model(x), y));
  }
  const auto local = net->fc1->weight.grad().clone();
  auto g = accelerator.gather(local.unsqueeze(0));
  CHECK_OR_FAIL(
      accelerator.sync_gradients() && !g[0].equal(g[1]),
      "a backward inside no_sync all-reduced the gradients");
  accelerator.backward(torch::mse_loss(model(x), y));
  g = accelerator.gather(net->fc1->weight.grad().unsqueeze(0));
  const auto locals = accelerator.gather(local.unsqueeze(0));
  // Both backwards added the same local gradient; the sum is averaged.
  CHECK_OR_FAIL(
      g[0].equal(g[1]) && torch::allclose(g[0], locals[0] + locals[1]),
      "the backward after no_sync did not average the accumulated sum");
  ampkit::set_seed(7, /*device_specific=*/true);
  const auto mine = torch::rand({4});
  ampkit::set_seed(7 + r);
  CHECK_OR_FAIL(
      torch::rand({4}).equal(mine),
      "set_seed(device_specific) is not seed + rank");
  const auto draws = accelerator.gather(mine.unsqueeze(0));
  CHECK_OR_FAIL(
      !draws[0].equal(draws[1]), "device_specific seeds drew the same numbers");
  return 0;
}

// accelerate's AcceleratedScheduler: a prepared scheduler advances
// num_processes times per optimizer step, once with split_batches (each step
// then consumed one global batch, not num_processes).
int scheduler_steps() {
  ampkit::Accelerator accelerator(base_options());
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  ampkit::optim::StepLR step_lr(sgd, 1000);
  auto [model, optimizer, scheduler] = accelerator.prepare(net, sgd, step_lr);
  auto one_step =
      [&, &model = model, &optimizer = optimizer, &scheduler = scheduler] {
        auto [x, y] = global_batch(0, 4);
        accelerator.backward(torch::mse_loss(model(x), y));
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
      };
  one_step();
  CHECK_OR_FAIL(
      step_lr.last_epoch() == 2,
      "without split_batches the scheduler should advance 2 times, got " +
          std::to_string(step_lr.last_epoch()));
  auto loader = accelerator.prepare_data_loader(
      Indices(8).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(4),
      ampkit::data::ShardedSamplerOptions().split_batches(true));
  (void)loader;  // preparing it is what tells the Accelerator
  one_step();
  CHECK_OR_FAIL(
      step_lr.last_epoch() == 3,
      "with split_batches the scheduler should advance once, got to " +
          std::to_string(step_lr.last_epoch()));
  return 0;
}

struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl()
      : used(register_module("used", torch::nn::Linear(8, 1))),
        unused(register_module("unused", torch::nn::Linear(8, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return used(x);
  }
  torch::nn::Linear used, unused;
};
TORCH_MODULE(TwoHeads);

// `static_graph`: the parameters without a gradient are allowed too, found
// in the first step instead of by a graph walk each step; three steps.
int unused_parameters(bool allow, bool static_graph = false) {
  ampkit::Accelerator accelerator(
      base_options().find_unused_parameters(allow).static_graph(static_graph));
  TwoHeads net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  if (static_graph) {
    const auto unused = net->unused->weight.detach().clone();
    for (int64_t step = 0; step < 3; ++step) {
      auto [x, y] = global_batch(accelerator.process_index() + 2 * step, 8);
      accelerator.backward(torch::mse_loss(model(x), y));
      optimizer.step();
      optimizer.zero_grad();
    }
    auto g = accelerator.gather(net->used->weight.detach().unsqueeze(0));
    CHECK_OR_FAIL(g[0].equal(g[1]), "used parameters differ after 3 steps");
    CHECK_OR_FAIL(net->unused->weight.equal(unused), "the unused head moved");
    return 0;
  }
  auto [x, y] = global_batch(accelerator.process_index(), 8);
  try {
    accelerator.backward(torch::mse_loss(model(x), y));
  } catch (const ampkit::UsageError& e) {
    const std::string m = e.what();
    std::cout << m << std::endl;
    CHECK_OR_FAIL(!allow, "find_unused_parameters(true) still failed: " + m);
    CHECK_OR_FAIL(
        m.find("unused.weight, unused.bias") != std::string::npos &&
            m.find("find_unused_parameters(true)") != std::string::npos,
        "the error does not name the unused parameters: " + m);
    return 0;
  }
  CHECK_OR_FAIL(allow, "a parameter without gradient went unreported");
  optimizer.step();
  auto g = accelerator.gather(net->used->weight.detach().unsqueeze(0));
  CHECK_OR_FAIL(g[0].equal(g[1]), "used parameters differ after the step");
  return 0;
}

// The DCGAN step of pytorch/examples cpp/dcgan under DDP, without
// find_unused_parameters: the discriminator's real and fake losses (the
// generator's forward ran, but neither backward reaches it), then the
// generator's loss through the discriminator. Each process takes its half
// of a global batch of 8; a plain LibTorch copy of both models trains on
// the whole batch beside them, and after 4 steps every weight equals it
// within 1e-5 (DDP's mean of the halves' mean losses is the whole batch's).
int gan_step() {
  ampkit::Accelerator accelerator(base_options());
  torch::manual_seed(11);
  auto make_g = [] {
    return torch::nn::Sequential(
        torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Linear(16, 6));
  };
  auto make_d = [] {
    return torch::nn::Sequential(
        torch::nn::Linear(6, 16),
        torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
        torch::nn::Linear(16, 1),
        torch::nn::Sigmoid());
  };
  auto g = make_g(), d = make_d(), g_ref = make_g(), d_ref = make_d();
  {
    torch::NoGradGuard no_grad;
    for (auto [from, to] : {std::pair{g, g_ref}, std::pair{d, d_ref}}) {
      for (size_t i = 0; i < from->parameters().size(); ++i) {
        to->parameters()[i].copy_(from->parameters()[i]);
      }
    }
  }
  auto adam = [](auto& m) {
    return torch::optim::Adam(
        m->parameters(), torch::optim::AdamOptions(1e-2).betas({0.5, 0.999}));
  };
  torch::optim::Adam g_opt = adam(g), d_opt = adam(d);
  torch::optim::Adam g_ref_opt = adam(g_ref), d_ref_opt = adam(d_ref);
  auto [gm, go] = accelerator.prepare(g, g_opt);
  auto [dm, dopt] = accelerator.prepare(d, d_opt);
  const int64_t n = accelerator.num_processes();
  const int64_t rank = accelerator.process_index();
  const int64_t per = 8 / n;
  // One GAN step of `G` and `D` on `real` and `noise`.
  auto step = [](auto&& G,
                 auto&& D,
                 auto&& backward,
                 auto& d_step,
                 auto& g_step,
                 const torch::Tensor& real,
                 const torch::Tensor& noise) {
    const auto ones = torch::ones({real.size(0), 1});
    const auto zeros = torch::zeros({real.size(0), 1});
    d_step.zero_grad();
    backward(torch::binary_cross_entropy(D(real), ones));
    const torch::Tensor fake = G(noise);
    backward(torch::binary_cross_entropy(D(fake.detach()), zeros));
    d_step.step();
    g_step.zero_grad();
    backward(torch::binary_cross_entropy(D(fake), ones));
    g_step.step();
  };
  for (int64_t s = 0; s < 4; ++s) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2000 + s);
    const auto real = torch::randn({8, 6}, gen).tanh();
    const auto noise = torch::randn({8, 4}, gen);
    step(
        [&](const torch::Tensor& x) { return gm(x); },
        [&](const torch::Tensor& x) { return dm(x); },
        [&](const torch::Tensor& loss) { accelerator.backward(loss); },
        dopt,
        go,
        real.slice(0, rank * per, (rank + 1) * per),
        noise.slice(0, rank * per, (rank + 1) * per));
    step(
        [&](const torch::Tensor& x) { return g_ref->forward(x); },
        [&](const torch::Tensor& x) { return d_ref->forward(x); },
        [](const torch::Tensor& loss) { loss.backward(); },
        d_ref_opt,
        g_ref_opt,
        real,
        noise);
  }
  for (auto [ours, ref] : {std::pair{g, g_ref}, std::pair{d, d_ref}}) {
    for (size_t i = 0; i < ours->parameters().size(); ++i) {
      const double diff = (ours->parameters()[i] - ref->parameters()[i])
                              .abs()
                              .max()
                              .item<double>();
      CHECK_OR_FAIL(
          diff < 1e-5,
          "the GAN's weights differ from one process's by " +
              std::to_string(diff));
    }
  }
  std::cout << "gan ok" << std::endl;
  return 0;
}

// A model whose synchronising forward no backward reached (its output
// detached from the loss) cannot be stepped: the optimizer's step is the
// error naming its parameters, with the hint.
int never_reached() {
  ampkit::Accelerator accelerator(base_options());
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto [x, y] = global_batch(accelerator.process_index(), 8);
  auto w = torch::ones({1}, torch::requires_grad());
  accelerator.backward((model(x).detach() * w).sum());
  try {
    optimizer.step();
  } catch (const ampkit::UsageError& e) {
    const std::string m = e.what();
    CHECK_OR_FAIL(
        m.find("4 parameter(s) got no gradient since its forward") !=
                std::string::npos &&
            m.find("fc1.weight, fc1.bias, fc2.weight, fc2.bias") !=
                std::string::npos &&
            m.find("find_unused_parameters(true)") != std::string::npos,
        "the error does not name the model's parameters: " + m);
    std::cout << "never reached ok" << std::endl;
    return 0;
  }
  return fail("a model no backward reached was stepped");
}

// accumulate(model, num_items) on 2 processes, 2 micro-steps each, with
// per-item losses summed and items masked unevenly (rank 1 has far fewer):
// the synchronised gradient equals one big batch's mean over every real
// item within 1e-6, under DDP and ZeRO-2 (`zero`).
int counted_items(int64_t zero) {
  ampkit::Accelerator accelerator(
      base_options().gradient_accumulation_steps(2).zero_stage(zero));
  torch::manual_seed(3);
  Net net;
  Net reference;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i) {
      reference->parameters()[i].copy_(net->parameters()[i]);
    }
  }
  torch::optim::SGD sgd(net->parameters(), 1.0);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const int64_t rank = accelerator.process_index();
  auto [x, y] = global_batch(7, 32);  // 4 micro-batches of 8 rows
  // Real items: rank 0 keeps most rows, rank 1 few.
  auto mask = torch::ones({32}, torch::kBool);
  mask.narrow(0, 3, 4).fill_(false);
  mask.narrow(0, 16, 14).fill_(false);
  for (int64_t k = 0; k < 2; ++k) {
    const int64_t begin = (rank * 2 + k) * 8;
    const auto m = mask.narrow(0, begin, 8);
    auto scope = accelerator.accumulate(model, m.sum());
    const auto err = (model(x.narrow(0, begin, 8)) - y.narrow(0, begin, 8))
                         .pow(2)
                         .squeeze(1);
    accelerator.backward(err.masked_select(m).sum());
  }
  // What the optimizer steps on: take one SGD step of lr 1 and compare the
  // move with the reference gradient.
  std::vector<torch::Tensor> before;
  for (auto& p : net->parameters()) {
    before.push_back(p.detach().clone());
  }
  optimizer.step();
  torch::mse_loss(reference(x.index({mask})), y.index({mask})).backward();
  for (size_t i = 0; i < before.size(); ++i) {
    const auto moved = before[i] - net->parameters()[i].detach();
    const auto want = reference->parameters()[i].grad();
    CHECK_OR_FAIL(
        torch::allclose(moved, want, 0, 1e-6),
        "parameter " + std::to_string(i) +
            ": the step differs from the big "
            "batch's mean gradient by " +
            std::to_string((moved - want).abs().max().item<double>()));
  }
  return 0;
}

int collectives() {
  ampkit::Accelerator accelerator(base_options());
  const int64_t w = accelerator.num_processes();
  const int64_t r = accelerator.process_index();
  CHECK_OR_FAIL(w == 2, "collectives expects 2 processes");
  // gather: dim 0 concatenation, 0-dim becomes [w].
  auto g = accelerator.gather(torch::full({2, 3}, static_cast<float>(r)));
  CHECK_OR_FAIL(g.sizes() == torch::IntArrayRef({4, 3}), "gather shape");
  CHECK_OR_FAIL(
      g[0][0].item<float>() == 0 && g[3][2].item<float>() == 1,
      "gather values");
  auto g0 = accelerator.gather(torch::tensor(static_cast<float>(r + 1)));
  CHECK_OR_FAIL(
      g0.sizes() == torch::IntArrayRef({2}) && g0[1].item<float>() == 2,
      "gather 0-dim");
  // reduce: sum, mean (integers averaged in float), max.
  auto v = torch::tensor({static_cast<float>(r + 1), 10.0f * (r + 1)});
  CHECK_OR_FAIL(
      accelerator.reduce(v, ampkit::ReduceOp::sum)
          .equal(torch::tensor({3.0f, 30.0f})),
      "reduce sum");
  CHECK_OR_FAIL(
      accelerator.reduce(v, ampkit::ReduceOp::mean)
          .equal(torch::tensor({1.5f, 15.0f})),
      "reduce mean");
  CHECK_OR_FAIL(
      accelerator.reduce(v, ampkit::ReduceOp::max)
          .equal(torch::tensor({2.0f, 20.0f})),
      "reduce max");
  auto mi = accelerator.reduce(torch::tensor({r + 2}), ampkit::ReduceOp::mean);
  CHECK_OR_FAIL(
      mi.is_floating_point() && mi.item<float>() == 2.5f,
      "reduce mean of integers");
  CHECK_OR_FAIL(
      v.equal(torch::tensor({static_cast<float>(r + 1), 10.0f * (r + 1)})),
      "reduce changed its input");
  // broadcast from process 1.
  auto b = accelerator.broadcast(torch::full({3}, static_cast<float>(r)), 1);
  CHECK_OR_FAIL(b.equal(torch::ones({3})), "broadcast");
  // pad_across_processes: rank 0 has 2 rows, rank 1 has 3.
  auto uneven = torch::full({2 + r, 2}, static_cast<float>(r + 1));
  auto padded = accelerator.pad_across_processes(uneven, 0, -1);
  CHECK_OR_FAIL(padded.size(0) == 3, "pad_across_processes size");
  if (r == 0) {
    CHECK_OR_FAIL(
        padded[2][0].item<float>() == -1 && padded[0][0].item<float>() == 1,
        "pad at the end");
    auto first = accelerator.pad_across_processes(uneven, 0, -1, true);
    CHECK_OR_FAIL(
        first[0][0].item<float>() == -1 && first[1][0].item<float>() == 1,
        "pad_first");
  } else {
    accelerator.pad_across_processes(uneven, 0, -1, true);
  }
  CHECK_OR_FAIL(
      accelerator.gather(padded).size(0) == 6, "gather after padding");
  // split_between_processes: 5 items -> [0,1,2] and [3,4].
  std::vector<int> items{0, 1, 2, 3, 4};
  auto share = accelerator.split_between_processes(items);
  CHECK_OR_FAIL(
      share == (r == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4}),
      "split_between_processes");
  auto padded_share = accelerator.split_between_processes(items, true);
  CHECK_OR_FAIL(padded_share.size() == 3, "split_between_processes padding");
  // main_process_first: the main process's scope finishes before the
  // others' start.
  const std::string marker =
      std::string(std::getenv("AMPKIT_TEST_DIR")) + "/main_first";
  {
    auto scope = accelerator.main_process_first();
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::ofstream(marker) << "done";
    } else {
      CHECK_OR_FAIL(
          std::ifstream(marker).good(),
          "main_process_first: rank 1 ran before rank 0 finished");
    }
  }
  // local_main_process_first: with one machine, local rank 0 goes first.
  const std::string local_marker =
      std::string(std::getenv("AMPKIT_TEST_DIR")) + "/local_main_first";
  {
    auto scope = accelerator.local_main_process_first();
    if (accelerator.local_process_index() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::ofstream(local_marker) << "done";
    } else {
      CHECK_OR_FAIL(
          std::ifstream(local_marker).good(),
          "local_main_process_first: local rank 1 ran before local rank 0 "
          "finished");
    }
  }
  int ran_here = 0;
  CHECK_OR_FAIL(
      accelerator.on_local_process(1, [&] { ++ran_here; }) ==
              (accelerator.local_process_index() == 1) &&
          ran_here == (accelerator.local_process_index() == 1 ? 1 : 0),
      "on_local_process(1) ran on the wrong process");
  // Triggers: rank 1 sets it; both see it once.
  CHECK_OR_FAIL(!accelerator.check_trigger(), "trigger set too early");
  if (r == 1) {
    accelerator.set_trigger();
  }
  CHECK_OR_FAIL(
      accelerator.check_trigger(), "check_trigger missed rank 1's trigger");
  CHECK_OR_FAIL(!accelerator.check_trigger(), "check_trigger did not reset");
  accelerator.wait_for_everyone();
  accelerator.print("collectives ok");
  return 0;
}

int debug_mismatch() {
  ampkit::Accelerator accelerator(base_options().debug(true));
  const int64_t r = accelerator.process_index();
  try {
    accelerator.gather(torch::zeros({r + 1, 3}));
  } catch (const ampkit::DistributedError& e) {
    const std::string m = e.what();
    std::cout << m << std::endl;
    CHECK_OR_FAIL(
        m.find("rank 0: [1, 3] Float") != std::string::npos &&
            m.find("rank 1: [2, 3] Float") != std::string::npos,
        "the debug-mode error does not list both shapes: " + m);
    return 0;
  }
  return fail("debug mode let mismatched shapes through");
}

// Rank 1 throws out of main after two steps; rank 0 keeps training and must
// get an error naming rank 1 well within the timeout.
int rank_fails() {
  ampkit::Accelerator accelerator(
      base_options().timeout(std::chrono::seconds(15)));
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  for (int64_t step = 0; step < 1000; ++step) {
    if (accelerator.process_index() == 1 && step == 2) {
      throw std::runtime_error("injected failure on rank 1 at step 2");
    }
    auto [x, y] = global_batch(step, 8);
    try {
      accelerator.backward(torch::mse_loss(model(x), y));
    } catch (const ampkit::DistributedError& e) {
      const std::string m = e.what();
      std::cout << m << std::endl;
      CHECK_OR_FAIL(
          m.find("rank 1 failed") != std::string::npos &&
              m.find("injected failure on rank 1") != std::string::npos,
          "the error does not name rank 1's failure: " + m);
      return 3;
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  return fail("rank 0 finished although rank 1 failed");
}

// Rank 1 stays away from the collective; rank 0's gather must fail once
// the 4 s timeout has passed (it reaches Gloo), saying nobody reported.
int rank_hangs() {
  ampkit::Accelerator accelerator(
      base_options().timeout(std::chrono::seconds(4)));
  const std::string done =
      std::string(std::getenv("AMPKIT_TEST_DIR")) + "/rank0_done";
  if (accelerator.process_index() == 1) {
    for (int i = 0; i < 300 && !std::ifstream(done).good(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    accelerator.gather(torch::ones({2}));
  } catch (const ampkit::DistributedError& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    std::ofstream(done) << "done";
    const std::string m = e.what();
    std::cout << m << "\nwaited " << waited << " s" << std::endl;
    CHECK_OR_FAIL(
        waited >= 3.5 && waited < 15,
        "the timeout did not hold: " + std::to_string(waited) + " s");
    CHECK_OR_FAIL(
        m.find("No other rank reported an error") != std::string::npos,
        "unexpected message: " + m);
    return 3;
  }
  std::ofstream(done) << "done";
  return fail("the gather returned although rank 1 never joined");
}

// Every TCP socket of this run's processes (listening or connected) is on
// loopback.
int listen_loopback() {
  ampkit::Accelerator accelerator(base_options());
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  auto [x, y] = global_batch(0, 8);
  accelerator.backward(torch::mse_loss(model(x), y));
  auto pids =
      accelerator.gather(torch::tensor({static_cast<int64_t>(::getpid())}));
  int status = 0;
  if (accelerator.is_main_process()) {
    FILE* ss = ::popen("ss -tanpH 2>&1", "r");
    CHECK_OR_FAIL(ss != nullptr, "cannot run ss");
    char line[4096];
    int ours = 0;
    while (std::fgets(line, sizeof(line), ss) != nullptr) {
      const std::string l = line;
      bool mine = false;
      for (int64_t i = 0; i < pids.numel(); ++i) {
        mine = mine ||
               l.find("pid=" + std::to_string(pids[i].item<int64_t>()) + ",") !=
                   std::string::npos;
      }
      if (!mine) {
        continue;
      }
      ++ours;
      std::istringstream fields(l);
      std::string state, recvq, sendq, local;
      fields >> state >> recvq >> sendq >> local;
      std::cout << "socket: " << state << ' ' << local << std::endl;
      if (local.rfind("127.", 0) != 0 && local.rfind("[::1]", 0) != 0) {
        std::cerr << "dist_worker: a socket outside loopback: " << l;
        status = 1;
      }
    }
    ::pclose(ss);
    if (ours == 0) {
      std::cout << "socket: none" << std::endl;
    }
  }
  accelerator.wait_for_everyone();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "train" && argc >= 5 && argc <= 7) {
      return train(
          argv[2],
          std::stoll(argv[3]),
          argv[4],
          argc >= 6 ? argv[5] : "no",
          argc == 7 ? argv[6] : "plain");
    }
    if (scenario == "zero" && argc == 8) {
      return zero_train(
          argv[2],
          std::stoll(argv[3]),
          std::stoll(argv[4]),
          argv[5],
          std::stod(argv[6]),
          std::string(argv[7]) == "inject");
    }
    if (scenario == "zero_overlap") {
      return zero_overlap();
    }
    if (scenario == "zero_resume" && argc == 4) {
      return zero_resume(argv[2], std::stoll(argv[3]));
    }
    if (scenario == "fsdp" && argc == 6) {
      return zero_train(
          argv[2],
          0,
          std::stoll(argv[4]),
          "no",
          std::stod(argv[5]),
          false,
          fsdp_options(argv[3]));
    }
    if (scenario == "fsdp_resume" && argc == 5) {
      return zero_resume(
          argv[2],
          0,
          fsdp_options(argv[3], argv[4]),
          std::string(argv[3]) + "_" + argv[4]);
    }
    if (scenario == "resume_on" && argc == 6) {
      return resume_on(argv[2], argv[3], fsdp_options(argv[4], argv[5]));
    }
    if (scenario == "metrics") {
      return metrics();
    }
    if (scenario == "auto_agree") {
      return auto_agree();
    }
    if (scenario == "nested_collectives") {
      return nested_collectives();
    }
    if (scenario == "local_sgd") {
      return local_sgd();
    }
    if (scenario == "no_sync") {
      return no_sync();
    }
    if (scenario == "micro_steps") {
      return micro_steps();
    }
    if (scenario == "scheduler_steps") {
      return scheduler_steps();
    }
    if (scenario == "unused") {
      return unused_parameters(false);
    }
    if (scenario == "never_reached") {
      return never_reached();
    }
    if (scenario == "gan") {
      return gan_step();
    }
    if (scenario == "unused_allowed") {
      return unused_parameters(true);
    }
    if (scenario == "counted_items" && argc == 3) {
      return counted_items(std::stoll(argv[2]));
    }
    if (scenario == "unused_static_graph") {
      return unused_parameters(false, /*static_graph=*/true);
    }
    if (scenario == "streams") {
      return streams();
    }
    if (scenario == "collectives") {
      return collectives();
    }
    if (scenario == "flat_collectives") {
      return flat_collectives();
    }
    if (scenario == "debug_mismatch") {
      return debug_mismatch();
    }
    if (scenario == "rank_hangs") {
      return rank_hangs();
    }
    if (scenario == "listen") {
      return listen_loopback();
    }
  } catch (const std::exception& e) {
    return fail(std::string("unexpected exception: ") + e.what());
  }
  if (scenario == "rank_fails") {
    return rank_fails();  // rank 1's exception leaves main on purpose
  }
  std::cerr
      << "usage: dist_worker train OUT ACCUMULATION PRECISION [COMPRESSION "
         "[plain|view|static]] | "
         "zero OUT STAGE ACCUMULATION PRECISION CLIP inject|no | "
         "zero_resume DIR STAGE | "
         "fsdp OUT DDP|FULL_SHARD|SHARD_GRAD_OP|NO_SHARD ACCUMULATION CLIP | "
         "fsdp_resume DIR STRATEGY FULL_STATE_DICT|SHARDED_STATE_DICT | "
         "resume_on OUT CHECKPOINT DDP|STRATEGY STATE_DICT | "
         "metrics | micro_steps | no_sync | unused | unused_allowed | "
         "unused_static_graph | counted_items ZERO_STAGE | streams | "
         "rank_hangs | "
         "collectives | debug_mismatch | rank_fails | listen\n";
  return 2;
}
