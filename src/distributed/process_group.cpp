#include "ampkit/distributed/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "ampkit/error.h"
#include "ampkit/utils/warnings.h"
#include "distributed/compat.h"
#include "distributed/file_rendezvous.h"
#include "distributed/group_impl.h"
#include "distributed/route.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {

using detail::file_rendezvous;
using detail::FileRendezvous;
using detail::seconds;

namespace {

constexpr int kMaxDims = 8;

std::string failure_key(int64_t rank) {
  return "ampkit/failed/" + std::to_string(rank);
}

std::atomic<ProcessGroup*> g_active{nullptr};
std::terminate_handler g_previous_terminate = nullptr;

// An uncaught exception ends the process without unwinding: tell the other
// ranks why before it goes.
[[noreturn]] void report_and_terminate() {
  if (ProcessGroup* group = g_active.load()) {
    std::string message = "terminated";
    if (auto current = std::current_exception()) {
      try {
        std::rethrow_exception(current);
      } catch (const std::exception& e) {
        message = std::string("uncaught exception: ") + e.what();
      } catch (...) {
        message = "uncaught exception of unknown type";
      }
    }
    group->report_failure(message);
  }
  if (g_previous_terminate != nullptr) {
    g_previous_terminate();
  }
  std::abort();
}

std::string describe_shape(const std::vector<int64_t>& encoded) {
  // encoded: ndim, dtype, dims...
  std::ostringstream out;
  out << '[';
  for (int64_t i = 0; i < encoded[0] && i < kMaxDims; ++i) {
    out << (i ? ", " : "") << encoded[2 + i];
  }
  if (encoded[0] > kMaxDims) {
    out << ", ...";
  }
  out << "] " << c10::toString(static_cast<c10::ScalarType>(encoded[1]));
  return out.str();
}

// The group's backend over its store: NCCL, or Gloo bound to bind_host.
void connect_backend(ProcessGroup::Impl& im, int rank, int size) {
  if (im.backend == "nccl") {
    im.pg = detail::make_nccl_group(im.store, rank, size, im.options.timeout());
  } else {
    im.pg = detail::make_gloo_group(
        im.store, rank, size, im.options.timeout(), im.bind_host);
  }
}

}  // namespace

ProcessGroup::ProcessGroup(
    const DistEnv& env, const GroupOptions& options, c10::Device device)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.env = env;
  im.options = options;
  im.device = device;
  set_warning_rank(env.rank, env.world_size);
  if (options.timeout().count() <= 0) {
    throw InvalidArgument(
        component::kDistributed,
        "timeout must be positive, got " + seconds(options.timeout()) +
            ". Pass e.g. std::chrono::minutes(30).");
  }
  const std::string& backend = options.backend();
  if (backend.empty()) {
    im.backend = device.is_cuda() && detail::nccl_available() ? "nccl" : "gloo";
  } else if (backend == "gloo" || backend == "nccl") {
    im.backend = backend;
  } else {
    throw InvalidArgument(
        component::kDistributed,
        "backend must be gloo or nccl, got '" + backend +
            "'. Leave it empty to pick NCCL on GPUs and Gloo on CPUs.");
  }
  const int rank = static_cast<int>(env.rank);
  const int size = static_cast<int>(env.world_size);
  if (env.single_node()) {
    auto r = file_rendezvous(env, options.timeout());
    im.rdzv_dir = r.dir;
    im.marker = env.rank == 0 ? r.marker : "";
    im.store = c10::make_intrusive<c10d::FileStore>(r.store_path, size);
    im.rendezvous = "FileStore " + r.store_path;
  } else {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(env.master_port);
    // Under `ampkit launch` on several machines, machine 0's launcher holds
    // the store (distributed/agent.h) and every worker is a client of it.
    const char* agent_round = std::getenv("AMPKIT_AGENT_STORE");
    const bool agent_store = agent_round != nullptr && *agent_round != '\0';
    o.isServer = env.rank == 0 && !agent_store;
    o.numWorkers = static_cast<size_t>(size);
    o.waitWorkers = true;
    o.timeout = options.timeout();
    warn(
        component::kDistributed,
        "the rendezvous port " + env.master_addr + ':' +
            std::to_string(env.master_port) +
            " (c10d TCPStore) is unauthenticated and listens on every "
            "interface: make it reachable only by the cluster's machines "
            "(firewall, private network).");
    const auto dialled = std::chrono::steady_clock::now();
    try {
      im.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (o.isServer && detail::port_in_use(e)) {
        // It did not wait for anyone: it could not listen.
        throw DistributedError(
            component::kDistributed,
            "rank 0 could not open the rendezvous port " +
                std::to_string(env.master_port) +
                ": another program holds it (" + what +
                "). Pass another --main_process_port (MASTER_PORT), the same "
                "on every machine, or stop what holds this one (ss -ltnp "
                "'sport = :" +
                std::to_string(env.master_port) + "').");
      }
      throw DistributedError(
          component::kDistributed,
          "rank " + std::to_string(rank) + " could not reach the rendezvous " +
              env.master_addr + ":" + std::to_string(env.master_port) +
              " after " +
              seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - dialled)) +
              " (timeout " + seconds(options.timeout()) +
              "), got: " + e.what() +
              ". Check MASTER_ADDR/MASTER_PORT, that rank 0 is running, and "
              "that the port is open between the machines.");
    }
    if (agent_store) {
      im.store = c10::make_intrusive<c10d::PrefixStore>(
          std::string("workers/") + agent_round, im.store);
    }
    im.rendezvous = "TCPStore " + env.master_addr + ":" +
                    std::to_string(env.master_port) +
                    (agent_store ? " (machine 0's launcher)" : "");
  }
  im.store->setTimeout(options.timeout());
  const std::string bind_host =
      detail::pick_network(env, im.backend, im.network);
  im.bind_host = bind_host;
  const auto started = std::chrono::steady_clock::now();
  try {
    connect_backend(im, rank, size);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    const std::string what = e.what();
    // Gloo says "connect [ADDR]:PORT: ..." with the address the peer
    // advertised through the store.
    const auto at = what.find("connect [");
    const std::string peer =
        at == std::string::npos
            ? ""
            : what.substr(at + 9, what.find(']', at) - (at + 9));
    std::string hint;
    if (!peer.empty() && is_loopback(peer) && !env.single_node()) {
      hint = "A peer advertised the loopback address " + peer +
             ", which no other machine can reach: on that machine set "
             "GLOO_SOCKET_IFNAME to the interface that reaches this one, "
             "or leave it unset and MASTER_ADDR routable so ampkit finds it.";
    } else if (!peer.empty()) {
      hint = "A peer advertised " + peer +
             " and this machine could not reach it: check that the machines "
             "reach each other on that address (firewall, routes), or set "
             "GLOO_SOCKET_IFNAME on that machine to an interface this one "
             "can reach. This process used " +
             im.network + ".";
    } else {
      hint =
          "Every rank must use the same MASTER_ADDR, MASTER_PORT and "
          "WORLD_SIZE; this process used " +
          im.network + ".";
    }
    throw DistributedError(
        component::kDistributed,
        "rank " + std::to_string(rank) + " could not connect the " +
            im.backend + " group of " + std::to_string(size) +
            " processes after " + seconds(took) + " (" + im.rendezvous +
            "), got: " + what + ". " + hint);
  }
  ProcessGroup* expected = nullptr;
  if (g_active.compare_exchange_strong(expected, this)) {
    g_previous_terminate = std::set_terminate(report_and_terminate);
  }
}

ProcessGroup::ProcessGroup() : impl_(std::make_unique<Impl>()) {}

std::shared_ptr<ProcessGroup> ProcessGroup::subgroup(
    const std::string& name, const std::vector<int64_t>& ranks) {
  auto& im = *impl_;
  std::vector<std::string> listed;
  for (int64_t r : ranks) {
    listed.push_back(std::to_string(r));
  }
  const auto shown = "subgroup '" + name + "' of ranks [" +
                     ampkit::detail::join(listed, ", ") + "]";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= im.env.world_size ||
        (i > 0 && ranks[i] <= ranks[i - 1])) {
      throw InvalidArgument(
          component::kDistributed,
          shown + ": ranks must be increasing, each from 0 to " +
              std::to_string(im.env.world_size - 1) + ".");
    }
  }
  const auto at = std::find(ranks.begin(), ranks.end(), im.env.rank);
  if (at == ranks.end()) {
    throw UsageError(
        component::kDistributed,
        shown + ": this process (rank " + std::to_string(im.env.rank) +
            ") is not one of them; only its members create a subgroup.");
  }
  std::shared_ptr<ProcessGroup> sub(new ProcessGroup());
  auto& s = *sub->impl_;
  s.env = im.env;
  s.env.rank = at - ranks.begin();
  s.env.world_size = static_cast<int64_t>(ranks.size());
  s.options = im.options;
  s.backend = im.backend;
  s.device = im.device;
  s.rendezvous = im.rendezvous + ", subgroup " + name;
  s.network = im.network;
  s.bind_host = im.bind_host;
  s.root_store = im.root_store ? im.root_store : im.store;
  for (int64_t r : ranks) {
    s.members.push_back(im.global_rank(r));
  }
  s.store = c10::make_intrusive<c10d::PrefixStore>(
      "ampkit/subgroup/" + name, im.store);
  const int rank = static_cast<int>(s.env.rank);
  const int size = static_cast<int>(s.env.world_size);
  try {
    connect_backend(s, rank, size);
  } catch (const Error&) {
    throw;
  } catch (...) {
    rethrow_explained("creating the " + shown);
  }
  return sub;
}

ProcessGroup::~ProcessGroup() {
  auto& im = *impl_;
  ProcessGroup* self = this;
  if (g_active.compare_exchange_strong(self, nullptr)) {
    std::set_terminate(g_previous_terminate);
  }
  im.pg.reset();
  im.store.reset();  // the last FileStore out deletes the store file
  if (!im.marker.empty()) {
    ::unlink(im.marker.c_str());
  }
  if (!im.rdzv_dir.empty()) {
    // Succeeds for whichever rank leaves the directory empty.
    ::rmdir(im.rdzv_dir.c_str());
  }
}

int64_t ProcessGroup::rank() const {
  return impl_->env.rank;
}
int64_t ProcessGroup::size() const {
  return impl_->env.world_size;
}
const DistEnv& ProcessGroup::env() const {
  return impl_->env;
}
const GroupOptions& ProcessGroup::options() const {
  return impl_->options;
}
const std::string& ProcessGroup::backend() const {
  return impl_->backend;
}
const std::string& ProcessGroup::rendezvous() const {
  return impl_->rendezvous;
}
const std::string& ProcessGroup::network() const {
  return impl_->network;
}

void ProcessGroup::report_failure(const std::string& message) noexcept {
  auto& im = *impl_;
  if (im.peer_failed.load() || im.failure_reported.exchange(true) ||
      !im.store) {
    return;
  }
  try {
    const std::string text = message.substr(0, 4000);
    (im.root_store ? im.root_store : im.store)
        ->set(
            failure_key(im.global_rank(im.env.rank)),
            std::vector<uint8_t>(text.begin(), text.end()));
  } catch (...) {
    // The store may be gone with rank 0; the others then time out.
  }
}

void ProcessGroup::rethrow_explained(const std::string& operation) {
  auto& im = *impl_;
  std::string original = "unknown error";
  const auto current = std::current_exception();
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& e) {
    original = e.what();
  } catch (...) {
  }
  // The failed rank writes its key before its sockets close; give it a
  // moment to land.
  std::string causes;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::min<std::chrono::milliseconds>(
          im.options.timeout(), std::chrono::milliseconds(2000));
  do {
    const auto& store = im.root_store ? im.root_store : im.store;
    for (int64_t k = 0; k < im.env.world_size; ++k) {
      if (k == im.env.rank) {
        continue;
      }
      const int64_t r = im.global_rank(k);
      try {
        if (store && store->check({failure_key(r)})) {
          const auto bytes = store->get(failure_key(r));
          causes += (causes.empty() ? "" : "; ") + std::string("rank ") +
                    std::to_string(r) +
                    " failed: " + std::string(bytes.begin(), bytes.end());
        }
      } catch (...) {
        // The store itself is unreachable (rank 0 gone over TCPStore).
      }
    }
    if (!causes.empty()) {
      break;
    }
    // Our own error (a debug-mode shape mismatch) needs no waiting.
    try {
      std::rethrow_exception(current);
    } catch (const Error&) {
      throw;
    } catch (...) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  if (!causes.empty()) {
    im.peer_failed = true;
    throw DistributedError(
        component::kDistributed,
        operation + " on rank " + std::to_string(im.global_rank(im.env.rank)) +
            " stopped because " + causes + " (the " + im.backend +
            " error here: " + original + ")");
  }
  throw DistributedError(
      component::kDistributed,
      operation + " on rank " + std::to_string(im.global_rank(im.env.rank)) +
          " failed: " + original +
          ". No other rank reported an error: one may have been killed, "
          "stuck past the timeout (" +
          seconds(im.options.timeout()) +
          "), or called a different collective; see the other ranks' "
          "output, and run with debug mode (AMPKIT_DEBUG=1) to compare "
          "shapes.");
}

std::vector<std::vector<int64_t>> ProcessGroup::all_shapes(
    const torch::Tensor& tensor) {
  auto& im = *impl_;
  auto mine = torch::full({2 + kMaxDims}, -1, torch::kLong);
  auto* p = mine.data_ptr<int64_t>();
  p[0] = tensor.dim();
  p[1] = static_cast<int64_t>(tensor.scalar_type());
  for (int64_t i = 0; i < tensor.dim() && i < kMaxDims; ++i) {
    p[2 + i] = tensor.size(i);
  }
  if (im.backend == "nccl") {
    mine = mine.to(im.device);
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int64_t r = 0; r < im.env.world_size; ++r) {
    outputs[0].push_back(torch::empty_like(mine));
  }
  std::vector<at::Tensor> inputs{mine};
  try {
    im.pg->allgather(outputs, inputs)->wait();
  } catch (...) {
    rethrow_explained("the debug-mode shape check");
  }
  std::vector<std::vector<int64_t>> shapes;
  for (auto& t : outputs[0]) {
    auto cpu = t.cpu();
    shapes.emplace_back(
        cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel());
  }
  return shapes;
}

namespace {
void check_same(
    ProcessGroup& group,
    const std::string& operation,
    const torch::Tensor& tensor) {
  if (!group.options().debug()) {
    return;
  }
  const auto shapes = group.all_shapes(tensor);
  bool same = true;
  for (const auto& s : shapes) {
    same = same && s == shapes[0];
  }
  if (same) {
    return;
  }
  std::string list;
  for (size_t r = 0; r < shapes.size(); ++r) {
    list += (r ? "; rank " : "rank ") + std::to_string(r) + ": " +
            describe_shape(shapes[r]);
  }
  throw DistributedError(
      "Distributed",
      "debug mode: " + operation +
          " needs the same shape and dtype on every process, got " + list +
          ". Pad uneven tensors first (pad_across_processes), or make every "
          "process call the same collective with the same shape.");
}
}  // namespace

namespace {

// What the backend takes: NCCL refuses CPU tensors, so under NCCL a CPU
// tensor (a count, a flag, a metric built with torch::tensor) makes the
// round trip through the group's GPU; results come back on its device.
at::Tensor for_backend(const ProcessGroup::Impl& im, const at::Tensor& t) {
  if (im.backend == "nccl" && !t.is_cuda()) {
    return t.to(im.device).contiguous();
  }
  return t.contiguous();
}

// for_backend, for the point-to-point exchanges on Gloo, whose send and
// recv take host memory: a tensor on a GPU is staged there.
at::Tensor for_exchange(const ProcessGroup::Impl& im, const at::Tensor& t) {
  at::Tensor ready = for_backend(im, t);
  return ready.is_cpu() ? ready : ready.cpu();
}

// Collectives in flight: their works, and the tensors the backend reads or
// writes, kept alive until they are done. Gloo's point-to-point transfers
// go on after their work object is dropped, into its buffers: with
// `keep_unfinished`, one dropped before it finished (an error path, a
// prefetch nobody waited for) is never freed, so the transport cannot
// write into freed memory. (NCCL's works keep their own tensors.)
class InFlight {
 public:
  explicit InFlight(bool keep_unfinished = false)
      : state_(new State, keep_unfinished ? &release_if_finished : &release) {}
  void add(c10::intrusive_ptr<c10d::Work> work) {
    state_->works.push_back(std::move(work));
  }
  void keep(std::vector<at::Tensor> tensors) {
    state_->held.push_back(std::move(tensors));
  }
  void wait() {
    for (auto& work : state_->works) {
      work->wait();
    }
  }

 private:
  struct State {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<at::Tensor>> held;
  };
  static void release(State* state) {
    delete state;
  }
  static void release_if_finished(State* state) {
    for (auto& work : state->works) {
      if (!work->isCompleted()) {
        return;  // kept on purpose (above)
      }
    }
    delete state;
  }
  std::shared_ptr<State> state_;
};

// One point-to-point exchange on Gloo: receives[q] from process q, then
// sends[q] to process q (undefined or empty: nothing; both sides skip the
// same empty parts), as bytes, which Gloo moves for any dtype (bf16 in
// LibTorch 1.13 too). Gloo matches a pair's messages of one tag in the
// order they were posted, so exchanges in flight at once keep apart as
// long as every process posts them in the same order, as collectives are.
InFlight post_exchange(
    c10d::ProcessGroup& pg,
    int tag,
    const std::vector<at::Tensor>& receives,
    const std::vector<at::Tensor>& sends) {
  InFlight posted(/*keep_unfinished=*/true);
  auto post = [&](const at::Tensor& t, size_t peer, bool send) {
    if (!t.defined() || t.numel() == 0) {
      return;
    }
    std::vector<at::Tensor> bytes{t.view(at::kByte)};
    posted.add(
        send ? pg.send(bytes, static_cast<int>(peer), tag)
             : pg.recv(bytes, static_cast<int>(peer), tag));
    posted.keep(std::move(bytes));
  };
  for (size_t q = 0; q < receives.size(); ++q) {
    post(receives[q], q, false);
  }
  for (size_t q = 0; q < sends.size(); ++q) {
    post(sends[q], q, true);
  }
  return posted;
}

// Gloo's reduce-scatter, point to point: each process sends every other
// process that one's part of `flat` and sums the parts it receives into its
// own, in rank order (so a run repeats to the bit). Each process sends and
// receives (N-1)/N of `flat`, half of what an all-reduce moves; Gloo's own
// reduce_scatter is slower than its all-reduce (bench/gloo_collectives.py,
// docs/benchmarks.md).
PendingCollective reduce_scatter_by_exchange(
    ProcessGroup& group,
    torch::Tensor& output,
    const at::Tensor& flat,
    const std::vector<int64_t>& bounds,
    const std::string& operation) {
  constexpr int kTag = 0x5253;
  const int64_t n = group.size();
  const int64_t rank = group.rank();
  const int64_t begin = bounds[rank];
  const int64_t length = bounds[rank + 1] - begin;
  auto& pg = *group.impl().pg;
  // The lowest other rank whose contribution is received straight into
  // the result (addition commutes, so the rank order's sum is unchanged).
  const int64_t first_peer = rank == 0 ? 1 : 0;
  // Received into `output` directly unless that would overwrite what is
  // still to be sent or added (an output inside `flat`).
  const bool in_place = output.is_contiguous() &&
                        output.scalar_type() == flat.scalar_type() &&
                        output.device() == flat.device() &&
                        !output.storage().is_alias_of(flat.storage());
  try {
    at::Tensor target = in_place ? output : at::empty({length}, flat.options());
    std::vector<at::Tensor> received(n);  // by rank; own: undefined
    std::vector<at::Tensor> sent(n);
    for (int64_t q = 0; q < n; ++q) {
      if (q != rank) {
        received[q] = length == 0 || q == first_peer
                          ? target
                          : at::empty({length}, flat.options());
        sent[q] = flat.narrow(0, bounds[q], bounds[q + 1] - bounds[q]);
      }
    }
    InFlight posted = post_exchange(pg, kTag, received, sent);
    return PendingCollective([&group,
                              posted,
                              received,
                              target,
                              output,
                              flat,
                              begin,
                              length,
                              rank,
                              first_peer,
                              operation]() mutable {
      try {
        posted.wait();
        if (length == 0) {
          return;
        }
        const at::Tensor own = flat.narrow(0, begin, length);
        const auto n = static_cast<int64_t>(received.size());
        if (n == 1) {
          target.copy_(own);
        } else {
          for (int64_t q = 0; q < n; ++q) {
            if (q != first_peer) {
              target.add_(q == rank ? own : received[q]);
            }
          }
        }
        if (!target.is_same(output)) {
          output.copy_(target);
        }
      } catch (...) {
        group.rethrow_explained(operation);
      }
    });
  } catch (...) {
    group.rethrow_explained(operation);
  }
}

}  // namespace

void ProcessGroup::barrier() {
  try {
    impl_->pg->barrier()->wait();
  } catch (...) {
    rethrow_explained("wait_for_everyone (barrier)");
  }
}

void ProcessGroup::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::mean && !tensor.is_floating_point()) {
    throw InvalidArgument(
        component::kDistributed,
        "all_reduce mean needs a floating tensor, got " +
            std::string(c10::toString(tensor.scalar_type())) +
            ". Convert it first (tensor.to(torch::kFloat)).");
  }
  check_same(*this, "all_reduce", tensor);
  try {
    std::vector<at::Tensor> tensors{for_backend(*impl_, tensor)};
    c10d::AllreduceOptions o;
    o.reduceOp =
        op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    impl_->pg->allreduce(tensors, o)->wait();
    if (!tensors[0].is_same(tensor)) {
      tensor.copy_(tensors[0]);
    }
    if (op == ReduceOp::mean) {
      tensor.div_(static_cast<double>(size()));
    }
  } catch (...) {
    rethrow_explained("all_reduce");
  }
}

std::vector<torch::Tensor> ProcessGroup::all_gather(
    const torch::Tensor& tensor) {
  check_same(*this, "gather (all_gather)", tensor);
  try {
    std::vector<at::Tensor> inputs{for_backend(*impl_, tensor)};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int64_t r = 0; r < size(); ++r) {
      outputs[0].push_back(torch::empty_like(inputs[0]));
    }
    impl_->pg->allgather(outputs, inputs)->wait();
    for (auto& t : outputs[0]) {
      t = t.to(tensor.device());
    }
    return outputs[0];
  } catch (...) {
    rethrow_explained("gather (all_gather)");
  }
}

void ProcessGroup::all_gather_into(
    torch::Tensor& output, const torch::Tensor& input) {
  all_gather_into_async(output, input).wait();
}

PendingCollective ProcessGroup::all_gather_into_async(
    torch::Tensor& output, const torch::Tensor& input) {
  const int64_t n = input.numel();
  if (output.numel() != n * size() || !output.is_contiguous()) {
    throw InvalidArgument(
        component::kDistributed,
        "all_gather_into needs a contiguous output of " +
            std::to_string(n * size()) + " values (" + std::to_string(n) +
            " from each of " + std::to_string(size()) + " processes), got " +
            std::to_string(output.numel()) + ".");
  }
  check_same(*this, "gather (all_gather_into)", input);
  const std::string operation = "gather (all_gather_into)";
  try {
    const bool nccl = impl_->backend == "nccl";
    const at::Tensor whole = input.reshape({-1});
    std::vector<at::Tensor> inputs{
        nccl ? for_backend(*impl_, whole) : for_exchange(*impl_, whole)};
    const bool direct = output.device() == inputs[0].device() &&
                        output.scalar_type() == inputs[0].scalar_type();
    at::Tensor target =
        direct ? output : at::empty({n * size()}, inputs[0].options());
    at::Tensor flat = target.view({-1});
    int64_t part = n;
    if (!can_sum(inputs[0].scalar_type())) {
      // A gather only moves bytes: bf16 travels as twice as many bytes.
      inputs[0] = inputs[0].view(at::kByte);
      flat = flat.view(at::kByte);
      part = inputs[0].numel();
    }
    InFlight posted;
    if (nccl) {
      // One flat buffer in, one out, no list of views.
      posted.add(impl_->pg->_allgather_base(flat, inputs[0]));
      posted.keep({inputs[0], flat});
    } else {
      // Gloo: point to point, this process's part sent to every other and
      // theirs received in place, faster than Gloo's allgather (25 MB on
      // 2 processes: bench/gloo_collectives.py, docs/benchmarks.md).
      constexpr int kTag = 0x4147;
      std::vector<at::Tensor> receives;
      std::vector<at::Tensor> sends(size(), inputs[0]);
      for (int64_t r = 0; r < size(); ++r) {
        receives.push_back(flat.narrow(0, r * part, part));
      }
      receives[rank()].copy_(inputs[0]);
      receives[rank()] = at::Tensor();
      sends[rank()] = at::Tensor();
      posted = post_exchange(*impl_->pg, kTag, receives, sends);
    }
    return PendingCollective(
        [this, posted, target, output, direct, operation]() mutable {
          try {
            posted.wait();
            if (!direct) {
              output.copy_(target.view(output.sizes()));
            }
          } catch (...) {
            rethrow_explained(operation);
          }
        });
  } catch (...) {
    rethrow_explained(operation);
  }
}

void ProcessGroup::broadcast(torch::Tensor& tensor, int64_t root) {
  check_same(*this, "broadcast", tensor);
  try {
    std::vector<at::Tensor> tensors{for_backend(*impl_, tensor)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    impl_->pg->broadcast(tensors, o)->wait();
    if (!tensors[0].is_same(tensor)) {
      tensor.copy_(tensors[0]);
    }
  } catch (...) {
    rethrow_explained("broadcast");
  }
}

bool ProcessGroup::can_sum(c10::ScalarType dtype) const {
  return AMPKIT_GLOO_HAS_BF16 || impl_->backend != "gloo" ||
         dtype != c10::ScalarType::BFloat16;
}

bool ProcessGroup::has_reduce_scatter() const {
  // Gloo has one from LibTorch 2.0, but slower than its all-reduce: for
  // 25 MB on 2 processes (torch 2.11) reduce_scatter took 27.6 ms and
  // reduce_scatter_tensor 36.8 ms, against 22.1 ms for all_reduce. There
  // reduce_scatter_by_exchange moves half an all-reduce's bytes instead.
  return impl_->backend == "nccl";
}

void ProcessGroup::reduce_scatter(
    torch::Tensor& output,
    torch::Tensor& flat,
    const std::vector<int64_t>& boundaries) {
  reduce_scatter_async(output, flat, boundaries).wait();
}

PendingCollective ProcessGroup::reduce_scatter_async(
    torch::Tensor& output,
    torch::Tensor& flat,
    const std::vector<int64_t>& boundaries) {
  const int64_t n = size();
  bool valid = static_cast<int64_t>(boundaries.size()) == n + 1 &&
               boundaries.front() == 0 && boundaries.back() == flat.numel() &&
               flat.dim() == 1;
  for (size_t i = 1; valid && i < boundaries.size(); ++i) {
    valid = boundaries[i - 1] <= boundaries[i];
  }
  if (!valid) {
    throw InvalidArgument(
        component::kDistributed,
        "reduce_scatter needs a 1-dim tensor and " + std::to_string(n + 1) +
            " non-decreasing boundaries from 0 to its length " +
            std::to_string(flat.numel()) + ", got " +
            std::to_string(boundaries.size()) + " boundaries.");
  }
  const int64_t begin = boundaries[rank()];
  const int64_t length = boundaries[rank() + 1] - begin;
  if (output.numel() != length) {
    throw InvalidArgument(
        component::kDistributed,
        "reduce_scatter's output must hold this process's part, " +
            std::to_string(length) + " values, got " +
            std::to_string(output.numel()) + ".");
  }
  check_same(*this, "reduce_scatter", flat);
  const std::string operation = "reduce_scatter";
  if (!has_reduce_scatter()) {
    return reduce_scatter_by_exchange(
        *this, output, for_exchange(*impl_, flat), boundaries, operation);
  }
  try {
    // NCCL: one flat buffer in, one out (c10d's _reduce_scatter_base),
    // padded only where the parts differ.
    int64_t longest = 0;
    bool even = true;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t part = boundaries[r + 1] - boundaries[r];
      even = even && part == boundaries[1];
      longest = std::max(longest, part);
    }
    at::Tensor padded = for_backend(*impl_, flat);
    if (!even) {
      const at::Tensor source = padded;
      padded = at::zeros({longest * n}, source.options());
      for (int64_t r = 0; r < n; ++r) {
        const int64_t part = boundaries[r + 1] - boundaries[r];
        padded.narrow(0, r * longest, part)
            .copy_(source.narrow(0, boundaries[r], part));
      }
    }
    at::Tensor result = at::empty({longest}, padded.options());
    InFlight posted;
    posted.add(impl_->pg->_reduce_scatter_base(result, padded));
    posted.keep({padded, result});
    return PendingCollective(
        [this, posted, result, length, output, operation]() mutable {
          try {
            posted.wait();
            output.copy_(result.narrow(0, 0, length));
          } catch (...) {
            rethrow_explained(operation);
          }
        });
  } catch (...) {
    rethrow_explained(operation);
  }
}

void ProcessGroup::broadcast_coalesced(
    const std::vector<torch::Tensor>& tensors, int64_t root) {
  if (tensors.empty()) {
    return;
  }
  try {
    torch::NoGradGuard no_grad;
    // DDP's broadcast bucket: 250 MB.
    c10d::broadcast_coalesced(
        impl_->pg, tensors, 250u * 1024u * 1024u, static_cast<int>(root));
  } catch (...) {
    rethrow_explained("broadcast of parameters and buffers");
  }
}

}  // namespace ampkit::dist
