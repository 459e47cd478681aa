// Weights only, as Hugging Face saves them: model.safetensors, or above
// max_shard_size the shards model-00001-of-0000N.safetensors with
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}).
// Also the model-state helpers save_state uses.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ampkit/checkpoint/safetensors.h"

namespace ampkit::checkpoint {

/// Parameters then buffers, by their dotted names (a module's state_dict).
NamedTensors model_state(const torch::nn::Module& model);

/// Copies `state` into the model's parameters and buffers. Nothing is
/// copied unless every name matches: otherwise an ampkit::InvalidArgument
/// from `origin` lists the missing, the unexpected and the shape-mismatched
/// names. dtypes are converted to the model's.
void load_model_state(
    torch::nn::Module& model,
    const NamedTensors& state,
    const std::string& origin);
/// load_model_state's check alone, changing nothing. `shapes`: the full
/// shape of parameters whose values live elsewhere (FSDP's, empty between
/// gathers), by name; the others are checked against the model's tensors.
void check_model_state(
    const torch::nn::Module& model,
    const NamedTensors& state,
    const std::string& origin,
    const std::map<std::string, std::vector<int64_t>>& shapes = {});

/// "10GB", "500MB", "2GiB", "123" (bytes): decimal units as accelerate's
/// convert_file_size_to_int (KB = 1000), binary with an "i". Throws
/// ampkit::InvalidArgument naming the text otherwise.
uint64_t parse_shard_size(const std::string& text);

/// Writes the model's weights into `dir` (created), sharded above
/// `max_shard_size` bytes per file; shards of an earlier save that the new
/// one does not use are removed. Every file is written atomically, the index
/// last.
void save_model(
    const torch::nn::Module& model,
    const std::string& dir,
    const std::string& max_shard_size = "10GB");
/// The same for a model's state given by name (model_state's layout).
void save_model_state(
    const NamedTensors& state,
    const std::string& dir,
    const std::string& max_shard_size = "10GB");

/// Loads what save_model wrote (or a Hugging Face safetensors checkpoint):
/// the index and its shards, else model.safetensors. Errors as
/// load_model_state, naming the files.
void load_model(torch::nn::Module& model, const std::string& dir);
/// What load_model reads from `dir`, by name, and what its errors name
/// (the single file, or the folder of a sharded save).
struct ModelFiles {
  NamedTensors state;
  std::string origin;
};
ModelFiles read_model(const std::string& dir);

}  // namespace ampkit::checkpoint
