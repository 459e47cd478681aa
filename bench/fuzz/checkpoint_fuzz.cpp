// libFuzzer target for ampkit's checkpoint readers (outside the normal build;
// bench/fuzz_checkpoint.sh builds and runs it). The first byte modulo 4
// picks the reader, the rest is its input:
//   0: decode_safetensors, and when it succeeds, encode_safetensors of the
//      result decoded again must give the same names, dtypes, shapes, bytes
//      and metadata;
//   1: decode_manifest, and when it succeeds, encode_manifest decoded again
//      must give the same manifest;
//   2: unpickle, the pickle machine of torch.save's data.pkl, with storages
//      of up to 1 MiB made on demand; every tensor it returns is read whole
//      (ASan sees any element outside its storage);
//   3: load_torch_file of the input as a whole torch.save file (its zip
//      directory, LibTorch's zip reader, the pickle and its storages),
//      each tensor read whole likewise.
// Only ampkit::IoError from the first decode is the expected answer to bad
// input; any other exception escapes (libFuzzer reports the abort), and a
// round-trip difference aborts with a message.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <unistd.h>

#include <fstream>

#include "ampkit/checkpoint/checkpoint_dir.h"
#include "ampkit/checkpoint/safetensors.h"
#include "ampkit/error.h"
#include "checkpoint/torch_pickle.h"

namespace {

namespace ck = ampkit::checkpoint;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(
      stderr, "checkpoint_fuzz: round trip failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Bitwise equality (torch::equal would call a NaN different from itself).
bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) {
    return false;
  }
  const auto ca = a.contiguous(), cb = b.contiguous();
  const size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

void fuzz_safetensors(std::string_view bytes) {
  ck::Safetensors first;
  try {
    first = ck::decode_safetensors(bytes, "fuzz.safetensors");
  } catch (const ampkit::IoError&) {
    return;
  }
  const std::string again =
      ck::encode_safetensors(first.tensors, first.metadata);
  const ck::Safetensors second =
      ck::decode_safetensors(again, "roundtrip.safetensors");
  if (second.tensors.size() != first.tensors.size()) {
    fail(
        std::to_string(first.tensors.size()) + " tensors, then " +
        std::to_string(second.tensors.size()));
  }
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    const auto& [n1, t1] = first.tensors[i];
    const auto& [n2, t2] = second.tensors[i];
    if (n1 != n2) {
      fail(
          "tensor " + std::to_string(i) + " is '" + n1 + "', then '" + n2 +
          "'");
    }
    if (!same_tensor(t1, t2)) {
      fail("tensor '" + n1 + "' differs after the round trip");
    }
  }
  if (second.metadata != first.metadata) {
    fail("the metadata differs after the round trip");
  }
}

bool same_manifest(const ck::Manifest& a, const ck::Manifest& b) {
  if (a.ampkit_version != b.ampkit_version || a.world_size != b.world_size ||
      a.step != b.step || a.files.size() != b.files.size()) {
    return false;
  }
  for (size_t i = 0; i < a.files.size(); ++i) {
    const auto &x = a.files[i], &y = b.files[i];
    if (x.name != y.name || x.size != y.size || x.crc32c != y.crc32c) {
      return false;
    }
  }
  return true;
}

void fuzz_manifest(std::string_view text) {
  ck::Manifest first;
  try {
    first = ck::decode_manifest(text, "fuzz/manifest.json");
  } catch (const ampkit::IoError&) {
    return;
  }
  const ck::Manifest second = ck::decode_manifest(
      ck::encode_manifest(first), "roundtrip/manifest.json");
  if (!same_manifest(first, second)) {
    fail("the manifest differs after encode_manifest and decode_manifest");
  }
}

// Every element of every tensor in `v` read (a sum), without recursing
// deeper than the reader allows values to nest.
void touch(const ck::PyRef& v, int depth = 0) {
  if (depth > 100) {
    fail("a value nested deeper than the reader's limit");
  }
  if (v->kind == ck::PyValue::Kind::tensor && v->tensor.numel() > 0) {
    (void)v->tensor.to(at::kDouble).sum().item<double>();
  }
  for (const auto& item : v->items) {
    touch(item, depth + 1);
  }
  if (v->state) {
    touch(v->state, depth + 1);
  }
}

void fuzz_pickle(std::string_view bytes) {
  const std::string pickle(bytes);
  auto storage = [](const std::string& key, at::ScalarType dtype, int64_t n) {
    if (n * static_cast<int64_t>(c10::elementSize(dtype)) > (1 << 20)) {
      throw ampkit::IoError("fuzz", "storage data/" + key + " is too big");
    }
    return at::zeros({n}, at::TensorOptions().dtype(dtype));
  };
  ck::PyRef value;
  try {
    value = ck::unpickle(pickle, "fuzz.pkl", storage);
  } catch (const ampkit::IoError&) {
    return;
  }
  touch(value);
}

void fuzz_torch_file(std::string_view bytes) {
  static const std::string path =
      "/tmp/ampkit_fuzz_" + std::to_string(::getpid()) + ".pt";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ck::PyRef value;
  try {
    value = ck::load_torch_file(path);
  } catch (const ampkit::IoError&) {
    return;
  }
  touch(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::string_view rest(
      reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      fuzz_safetensors(rest);
      break;
    case 1:
      fuzz_manifest(rest);
      break;
    case 2:
      fuzz_pickle(rest);
      break;
    default:
      fuzz_torch_file(rest);
  }
  return 0;
}
