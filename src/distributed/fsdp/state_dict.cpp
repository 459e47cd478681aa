// The model's state dicts: FULL_STATE_DICT gathered buffer by buffer,
// SHARDED_STATE_DICT's own shards, and loading either (checked whole, then
// set).
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ampkit/error.h"
#include "distributed/fsdp/fsdp_impl.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::dist {

std::vector<std::pair<std::string, torch::Tensor>>
FullyShardedModel::full_parameters(bool keep) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  std::unordered_map<std::string, torch::Tensor> values;
  for (auto& u : im.units) {
    for (auto& f : u->flats) {
      // One buffer at a time, in the shards' own dtype, into a temporary:
      // the units' gathered state is left as it is.
      const torch::Tensor full = im.gathered_copy(f, f.shard);
      if (!keep) {
        continue;
      }
      for (size_t i = 0; i < f.params.size(); ++i) {
        values[f.names[i]] = f.piece(full, i).clone();
      }
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (keep) {
    for (const auto& item : im.model->named_parameters()) {
      out.emplace_back(item.key(), values.at(item.key()));
    }
  }
  return out;
}

namespace {

// A flat buffer's name in sharded files: its unit's module path ("" is the
// root) and its index there (one buffer per param group and dtype).
std::string fsdp_buffer_name(const FsdpUnit& u, size_t k) {
  return (u.name.empty() ? std::string("(root)") : u.name) + "#" +
         std::to_string(k);
}

// What must agree for a saved buffer to load: its length and parameters.
std::string fsdp_buffer_layout(const FlatParam& f) {
  return std::to_string(f.total) + " " + ampkit::detail::join(f.names, ",");
}

constexpr const char* kFsdpPartKey = "fsdp_part";
constexpr const char* kFsdpPartsKey = "fsdp_parts";

}  // namespace

FullyShardedModel::SavedShards FullyShardedModel::local_shards() const {
  const auto& im = *impl_;
  SavedShards out;
  for (const auto& u : im.units) {
    for (size_t k = 0; k < u->flats.size(); ++k) {
      const FlatParam& f = u->flats[k];
      const std::string name = fsdp_buffer_name(*u, k);
      out.tensors.emplace_back(name, f.shard.detach());
      out.layout[name] = fsdp_buffer_layout(f);
    }
  }
  out.layout[kFsdpPartKey] = std::to_string(im.sharded() ? im.rank : 0);
  out.layout[kFsdpPartsKey] = std::to_string(im.parts());
  return out;
}

std::vector<torch::Tensor> FullyShardedModel::shards_from_saved(
    int64_t saved_processes,
    const std::function<SavedShards(int64_t)>& read) const {
  const auto& im = *impl_;
  torch::NoGradGuard no_grad;
  const int64_t global_rank = im.global ? im.global->rank() : 0;
  const int64_t global_size = im.global ? im.global->size() : 1;
  const int64_t my_part = im.sharded() ? im.rank : 0;
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP: the sharded weights saved by " +
            std::to_string(saved_processes) + " processes " + what +
            ". Resume with the model, wrap policy and param groups they "
            "were saved with.");
  };
  auto number = [&](const SavedShards& saved, const char* key, int64_t q) {
    const auto it = saved.layout.find(key);
    const auto value = it == saved.layout.end() ? std::nullopt
                                                : ampkit::detail::parse_int(
                                                      it->second, 0, INT64_MAX);
    if (!value) {
      fail(
          "have no valid '" + std::string(key) + "' in process " +
          std::to_string(q) + "'s file");
    }
    return *value;
  };
  // Every saved part of each buffer, by its index among the saved parts:
  // this process's own file when it was saved with this layout, else
  // every process's (replicas under HYBRID_SHARD hold the same part).
  std::vector<SavedShards> files;
  int64_t saved_parts = 0;
  if (saved_processes == global_size) {
    files.push_back(read(global_rank));
    if (number(files[0], kFsdpPartsKey, global_rank) != im.parts() ||
        number(files[0], kFsdpPartKey, global_rank) != my_part) {
      files.clear();
    }
  }
  if (files.empty()) {
    for (int64_t q = 0; q < saved_processes; ++q) {
      files.push_back(read(q));
    }
  }
  saved_parts = number(files[0], kFsdpPartsKey, 0);
  std::vector<torch::Tensor> loaded;
  for (auto& u : im.units) {
    for (size_t k = 0; k < u->flats.size(); ++k) {
      FlatParam& f = u->flats[k];
      const std::string name = fsdp_buffer_name(*u, k);
      std::vector<torch::Tensor> parts(static_cast<size_t>(saved_parts));
      for (size_t q = 0; q < files.size(); ++q) {
        const auto& saved = files[q];
        const auto layout = saved.layout.find(name);
        if (layout == saved.layout.end()) {
          fail(
              "have no buffer '" + name + "' (" +
              ampkit::detail::join(f.names, ", ") + ")");
        }
        if (layout->second != fsdp_buffer_layout(f)) {
          fail(
              "hold buffer '" + name + "' as '" + layout->second +
              "' (length, parameters), this model as '" +
              fsdp_buffer_layout(f) + "'");
        }
        const int64_t part =
            number(saved, kFsdpPartKey, static_cast<int64_t>(q));
        if (number(saved, kFsdpPartsKey, static_cast<int64_t>(q)) !=
                saved_parts ||
            part >= saved_parts) {
          fail("disagree on how many parts the buffers were split into");
        }
        for (const auto& [key, value] : saved.tensors) {
          if (key == name) {
            parts[static_cast<size_t>(part)] = value.reshape({-1});
          }
        }
      }
      torch::Tensor shard;
      if (files.size() == 1 && saved_parts == im.parts()) {
        shard = parts[static_cast<size_t>(my_part)];
        if (!shard.defined() || shard.numel() != f.shard_size) {
          fail("hold another shard length for buffer '" + name + "'");
        }
      } else {
        for (size_t p = 0; p < parts.size(); ++p) {
          if (!parts[p].defined()) {
            fail(
                "lack part " + std::to_string(p) + " of " +
                std::to_string(saved_parts) + " of buffer '" + name + "'");
          }
        }
        const torch::Tensor joined = torch::cat(parts);
        if (joined.numel() < f.total) {
          fail("hold too few elements of buffer '" + name + "'");
        }
        torch::Tensor full =
            torch::zeros({f.shard_size * im.parts()}, f.shard.options());
        full.narrow(0, 0, f.total).copy_(joined.narrow(0, 0, f.total));
        shard = full.narrow(0, my_part * f.shard_size, f.shard_size);
      }
      loaded.push_back(shard);
    }
  }
  return loaded;
}

std::vector<torch::Tensor> FullyShardedModel::shards_from_full(
    const std::vector<std::pair<std::string, torch::Tensor>>& parameters)
    const {
  const auto& im = *impl_;
  torch::NoGradGuard no_grad;
  std::unordered_map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, value] : parameters) {
    by_name[name] = &value;
  }
  const int64_t my_part = im.sharded() ? im.rank : 0;
  std::vector<torch::Tensor> shards;
  for (const auto& u : im.units) {
    for (const FlatParam& f : u->flats) {
      // Only the elements of this process's range are copied, parameter
      // by parameter; the padding past the last parameter stays zero.
      const int64_t lo = my_part * f.shard_size;
      const int64_t hi = std::min(lo + f.shard_size, f.total);
      torch::Tensor shard = torch::zeros({f.shard_size}, f.shard.options());
      for (size_t i = 0; i < f.names.size(); ++i) {
        const auto it = by_name.find(f.names[i]);
        if (it == by_name.end() ||
            it->second->sizes() != c10::IntArrayRef(f.shapes[i])) {
          throw InvalidArgument(
              component::kDistributed,
              "FSDP: the whole weights to load " +
                  std::string(
                      it == by_name.end()
                          ? "have no '" + f.names[i] + "'"
                          : "hold '" + f.names[i] + "' in another shape") +
                  "; nothing was loaded. Load weights saved from this "
                  "model.");
        }
        const int64_t begin = std::max(lo, f.offsets[i]);
        const int64_t end = std::min(hi, f.offsets[i] + f.numels[i]);
        if (end > begin) {
          shard.narrow(0, begin - lo, end - begin)
              .copy_(it->second->reshape({-1}).narrow(
                  0, begin - f.offsets[i], end - begin));
        }
      }
      shards.push_back(shard);
    }
  }
  return shards;
}

std::vector<std::pair<std::string, std::vector<int64_t>>>
FullyShardedModel::parameter_shapes() const {
  const auto& im = *impl_;
  std::unordered_map<std::string, std::vector<int64_t>> shapes;
  for (const auto& u : im.units) {
    for (const FlatParam& f : u->flats) {
      for (size_t i = 0; i < f.names.size(); ++i) {
        shapes[f.names[i]] = f.shapes[i];
      }
    }
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& item : im.model->named_parameters()) {
    out.emplace_back(item.key(), shapes.at(item.key()));
  }
  return out;
}

void FullyShardedModel::load_shards(const std::vector<torch::Tensor>& shards) {
  auto& im = *impl_;
  torch::NoGradGuard no_grad;
  size_t n = 0;
  for (auto& u : im.units) {
    n += u->flats.size();
  }
  if (shards.size() != n) {
    throw InvalidArgument(
        component::kDistributed,
        "FSDP load_shards: got " + std::to_string(shards.size()) +
            " shards for " + std::to_string(n) +
            " flat buffers. Pass what shards_from_saved or shards_from_full "
            "of this model returned.");
  }
  size_t k = 0;
  for (auto& u : im.units) {
    for (FlatParam& f : u->flats) {
      if (shards[k++].numel() != f.shard_size) {
        throw InvalidArgument(
            component::kDistributed,
            "FSDP load_shards: shard " + std::to_string(k - 1) + " holds " +
                std::to_string(shards[k - 1].numel()) + " elements, not " +
                std::to_string(f.shard_size) +
                ". Pass what shards_from_saved or shards_from_full of this "
                "model returned.");
      }
    }
  }
  // Everything checked: the gathered copies are dropped (the next forward
  // gathers the loaded shards), and the shards take the values.
  k = 0;
  for (auto& u : im.units) {
    for (FlatParam& f : u->flats) {
      im.release(f);
      f.shard.detach().copy_(shards[k++]);
    }
  }
}

}  // namespace ampkit::dist
