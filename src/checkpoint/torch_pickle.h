// Reads what Python's torch.save writes (the zip format: data.pkl and the
// tensors' storages under data/), for checkpoints of accelerate's layout.
// LibTorch's own unpickler reads only the subset TorchScript writes (no
// APPEND, no integers over 8 bytes, no globals it does not know), so this
// is a small pickle machine of its own (pickle_machine.cpp): protocol 2 to
// 5's opcodes for None, bools, integers, floats, strings, bytes, lists,
// tuples and dicts, torch tensors rebuilt from their storages, and only the
// globals torch.save writes for them (NumPy's random state stays an opaque
// call). Checkpoints come from elsewhere: every malformed or hostile file is
// an ampkit::IoError naming it, never a crash, a leak or a huge allocation.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ampkit::checkpoint {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

/// One unpickled Python object.
struct PyValue {
  enum class Kind {
    none,
    boolean,
    integer,
    floating,
    string,  // str
    bytes,
    list,
    tuple,
    dict,     // items: key, value, key, value...
    global,   // text: "module.name"
    call,     // items: the callable, its arguments; state: what BUILD set
    storage,  // tensor: a persistent id's storage, 1-D, before a view of it
    tensor,   // tensor: a view of a storage (shared, as torch.load shares)
  };
  Kind kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0;
  std::string text;  // str, bytes, or a global's name
  std::vector<PyRef> items;
  PyRef state;
  at::Tensor tensor;

  /// A dict's value under the str key `key`, or nullptr.
  PyRef get(const std::string& key) const;
  /// A dict's value under the int key `key`, or nullptr.
  PyRef get(int64_t key) const;
  /// "None", "int", "dict", ... (for messages).
  std::string type_name() const;
};

/// Unpickles torch.save's file at `path` (zip format). Throws
/// ampkit::IoError naming the file for a file that is not that, or an
/// opcode or global this reader does not handle.
PyRef load_torch_file(const std::string& path);

/// The tensor storage a persistent id names (torch.save's data/<key>): a
/// 1-D contiguous tensor of `numel` elements of `dtype`, called once per
/// key. It throws ampkit::IoError where the file has no such storage.
using StorageFn =
    std::function<at::Tensor(const std::string& key, at::ScalarType, int64_t)>;

/// Unpickles `pickle` alone (`where` names it in messages), taking tensor
/// storages from `storage`.
PyRef unpickle(
    const std::string& pickle,
    const std::string& where,
    const StorageFn& storage);

/// torch.save's storage type names ("torch.FloatStorage") and their dtypes.
const std::vector<std::pair<std::string, at::ScalarType>>& storage_types();

/// Values to write.
PyRef py_none();
PyRef py_bool(bool b);
PyRef py_int(int64_t i);
PyRef py_float(double f);
PyRef py_str(std::string s);
PyRef py_list(std::vector<PyRef> items);
PyRef py_tuple(std::vector<PyRef> items);
/// Keys and values alternating, as PyValue::items holds them.
PyRef py_dict(std::vector<PyRef> keys_and_values);
PyRef py_tensor(const at::Tensor& t);

/// Writes `value` as torch.save does: a zip holding a protocol-2 pickle
/// (data.pkl) and each tensor's storage under data/, which Python's
/// torch.load reads, weights_only included (the only globals are
/// torch._utils._rebuild_tensor_v2, torch.<Type>Storage and
/// collections.OrderedDict). Globals and calls cannot be written.
void save_torch_file(const std::string& path, const PyRef& value);

}  // namespace ampkit::checkpoint
