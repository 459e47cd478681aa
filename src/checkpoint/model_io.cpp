#include "ampkit/checkpoint/model_io.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "ampkit/error.h"
#include "ampkit/version.h"
#include "checkpoint/files.h"
#include "utils/components.h"

namespace ampkit::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string shard_name(size_t i, size_t n) {
  char buffer[64];
  std::snprintf(
      buffer, sizeof(buffer), "model-%05zu-of-%05zu.safetensors", i, n);
  return buffer;
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 20; ++i) {
    out += (i ? ", " : "") + names[i];
  }
  if (names.size() > 20) {
    out += ", ... (" + std::to_string(names.size()) + " in all)";
  }
  return out;
}

}  // namespace

NamedTensors model_state(const torch::nn::Module& model) {
  NamedTensors state;
  for (const auto& p : model.named_parameters(true)) {
    state.emplace_back(p.key(), p.value());
  }
  for (const auto& b : model.named_buffers(true)) {
    state.emplace_back(b.key(), b.value());
  }
  return state;
}

void check_model_state(
    const torch::nn::Module& model,
    const NamedTensors& state,
    const std::string& origin,
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, at::Tensor> given;
  for (const auto& [name, t] : state) {
    given[name] = t;
  }
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> expected;
  for (const auto& [name, t] : model_state(model)) {
    expected.insert(name);
    const auto shape = shapes.find(name);
    const c10::IntArrayRef own =
        shape == shapes.end() ? t.sizes() : c10::IntArrayRef(shape->second);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != own) {
      std::ostringstream s;
      s << name << " (checkpoint " << it->second.sizes() << ", model " << own
        << ")";
      mismatched.push_back(s.str());
    }
  }
  for (const auto& [name, t] : given) {
    if (!expected.count(name)) {
      unexpected.push_back(name);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string message = origin + " does not fit the model:";
    if (!missing.empty()) {
      message += " missing: " + list(missing) + ";";
    }
    if (!unexpected.empty()) {
      message += " unexpected: " + list(unexpected) + ";";
    }
    if (!mismatched.empty()) {
      message += " shape mismatch: " + list(mismatched) + ";";
    }
    message +=
        " nothing was loaded. Build the model with the architecture it was "
        "saved with.";
    throw InvalidArgument(component::kCheckpoint, message);
  }
}

void load_model_state(
    torch::nn::Module& model,
    const NamedTensors& state,
    const std::string& origin) {
  check_model_state(model, state, origin);
  std::map<std::string, at::Tensor> given(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : model_state(model)) {
    at::Tensor target = t;
    target.copy_(given[name]);
  }
}

uint64_t parse_shard_size(const std::string& text) {
  static const std::regex pattern(
      R"(\s*([0-9]+)\s*([KMGT]?)(I?)B?\s*)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, pattern) ||
      (m[2].str().empty() && !m[3].str().empty())) {
    throw InvalidArgument(
        component::kCheckpoint,
        "max_shard_size must be bytes or a size such as 10GB, 500MB or 2GiB, "
        "got '" +
            text + "'.");
  }
  const uint64_t n = std::stoull(m[1].str());
  const bool binary = !m[3].str().empty();
  const std::string unit = m[2].str();
  int power =
      unit.empty()
          ? 0
          : std::string("KMGT").find(static_cast<char>(std::toupper(unit[0]))) +
                1;
  uint64_t value = n;
  for (int i = 0; i < power; ++i) {
    value *= binary ? 1024 : 1000;
  }
  if (value == 0) {
    throw InvalidArgument(
        component::kCheckpoint,
        "max_shard_size must be above 0, got '" + text + "'.");
  }
  return value;
}

void save_model(
    const torch::nn::Module& model,
    const std::string& dir,
    const std::string& max_shard_size) {
  save_model_state(model_state(model), dir, max_shard_size);
}

void save_model_state(
    const NamedTensors& state,
    const std::string& dir,
    const std::string& max_shard_size) {
  const uint64_t limit = parse_shard_size(max_shard_size);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw IoError(
        component::kCheckpoint,
        "cannot create " + dir + ": " + ec.message() + ".");
  }
  std::vector<NamedTensors> shards(1);
  uint64_t current = 0, total = 0;
  for (const auto& [name, t] : state) {
    const uint64_t size = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (!shards.back().empty() && current + size > limit) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().emplace_back(name, t);
    current += size;
    total += size;
  }
  const Metadata metadata{{"format", "pt"}, {"ampkit_version", AMPKIT_VERSION}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((fs::path(dir) / kSingle).string(), shards[0], metadata);
    written.insert(kSingle);
    fs::remove(fs::path(dir) / kIndex, ec);
  } else {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_name(i + 1, shards.size());
      save_safetensors((fs::path(dir) / name).string(), shards[i], metadata);
      written.insert(name);
      for (const auto& [tensor, t] : shards[i]) {
        index["weight_map"][tensor] = name;
      }
    }
    detail::write_file_atomic(
        (fs::path(dir) / kIndex).string(), index.dump(2) + "\n");
    written.insert(kIndex);
  }
  static const std::regex stale(
      R"(model(-[0-9]{5}-of-[0-9]{5})?\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, stale) && !written.count(name)) {
      fs::remove(entry.path(), ec);
    }
  }
}

void load_model(torch::nn::Module& model, const std::string& dir) {
  const ModelFiles files = read_model(dir);
  load_model_state(model, files.state, files.origin);
}

ModelFiles read_model(const std::string& dir) {
  std::error_code ec;
  const fs::path index_path = fs::path(dir) / kIndex;
  if (!fs::exists(index_path, ec)) {
    const std::string single = (fs::path(dir) / kSingle).string();
    if (!fs::exists(single, ec)) {
      throw IoError(
          component::kCheckpoint,
          "no weights in " + dir + ": neither " + kSingle + " nor " + kIndex +
              " is there. Pass the folder save_model wrote.");
    }
    return {load_safetensors(single).tensors, single};
  }
  nlohmann::json index;
  const std::string text = detail::read_file(index_path.string());
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(
        component::kCheckpoint,
        index_path.string() + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    throw IoError(
        component::kCheckpoint,
        index_path.string() + ": no \"weight_map\" object.");
  }
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string() ||
        file.get<std::string>().find('/') != std::string::npos) {
      throw IoError(
          component::kCheckpoint,
          index_path.string() + ": weight_map['" + tensor +
              "'] must be a file name in the folder.");
    }
    by_file[file.get<std::string>()].insert(tensor);
  }
  NamedTensors state;
  for (const auto& [file, tensors] : by_file) {
    const std::string path = (fs::path(dir) / file).string();
    auto shard = load_safetensors(path);
    for (auto& [name, t] : shard.tensors) {
      if (!tensors.count(name)) {
        throw IoError(
            component::kCheckpoint,
            path + " holds '" + name +
                "', which the index maps to another file.");
      }
      state.emplace_back(name, std::move(t));
    }
  }
  return {std::move(state), dir};
}

}  // namespace ampkit::checkpoint
