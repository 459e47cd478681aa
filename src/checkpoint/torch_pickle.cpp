// torch.save's files of torch_pickle.h: reading the zip (zip_reader.h) and
// its storages for the pickle machine (pickle_machine.cpp), and writing
// values as torch.save does (LibTorch's zip writer).
#include "checkpoint/torch_pickle.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "ampkit/error.h"
#include "checkpoint/zip_reader.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::checkpoint {
namespace {

PyRef make(PyValue::Kind kind) {
  auto v = std::make_shared<PyValue>();
  v->kind = kind;
  return v;
}

}  // namespace

PyRef load_torch_file(const std::string& path) {
  ZipReader zip(path);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (pkl == nullptr) {
    throw IoError(
        component::kAccelerator,
        "cannot read " + path +
            " as a torch.save file (zip format): it has no data.pkl. Save it "
            "with torch.save (PyTorch 1.6 or later).");
  }
  const std::string pickle = zip.read(*pkl);
  auto storage = [&](const std::string& key, at::ScalarType dtype, int64_t n) {
    // n * itemsize is known not to overflow (the machine checked it).
    const uint64_t bytes = static_cast<uint64_t>(n) * c10::elementSize(dtype);
    const ZipEntry* record = zip.find("data/" + key);
    if (record == nullptr || record->size != bytes) {
      throw IoError(
          component::kAccelerator,
          ampkit::detail::str(
              path,
              ": storage data/",
              key,
              record == nullptr
                  ? std::string(" is missing")
                  : ampkit::detail::str(" holds ", record->size, " bytes"),
              ", its header says ",
              bytes,
              ". The file is damaged; save it again with torch.save."));
    }
    auto t = at::empty({n}, at::TensorOptions().dtype(dtype));
    if (bytes > 0) {
      zip.read(*record, t.data_ptr());
    }
    return t;
  };
  return unpickle(pickle, path, storage);
}

PyRef py_none() {
  return make(PyValue::Kind::none);
}
PyRef py_bool(bool b) {
  auto v = make(PyValue::Kind::boolean);
  v->boolean = b;
  return v;
}
PyRef py_int(int64_t i) {
  auto v = make(PyValue::Kind::integer);
  v->integer = i;
  return v;
}
PyRef py_float(double f) {
  auto v = make(PyValue::Kind::floating);
  v->floating = f;
  return v;
}
PyRef py_str(std::string s) {
  auto v = make(PyValue::Kind::string);
  v->text = std::move(s);
  return v;
}
PyRef py_list(std::vector<PyRef> items) {
  auto v = make(PyValue::Kind::list);
  v->items = std::move(items);
  return v;
}
PyRef py_tuple(std::vector<PyRef> items) {
  auto v = make(PyValue::Kind::tuple);
  v->items = std::move(items);
  return v;
}
PyRef py_dict(std::vector<PyRef> keys_and_values) {
  auto v = make(PyValue::Kind::dict);
  v->items = std::move(keys_and_values);
  return v;
}
PyRef py_tensor(const at::Tensor& t) {
  auto v = make(PyValue::Kind::tensor);
  v->tensor = t;
  return v;
}

namespace {

std::string storage_name(at::ScalarType dtype, const std::string& path) {
  for (const auto& [type, t] : storage_types()) {
    if (t == dtype) {
      return type.substr(type.find('.') + 1);  // torch.<Type>Storage
    }
  }
  throw InvalidArgument(
      component::kAccelerator,
      path + ": cannot write a tensor of dtype " +
          std::string(c10::toString(dtype)) + " for torch.load.");
}

class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {}

  std::string pickle(const PyRef& value) {
    out_ += "\x80\x02";  // PROTO 2
    write(value);
    out_ += '.';
    return out_;
  }
  const std::vector<at::Tensor>& storages() const {
    return storages_;
  }

 private:
  void little(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) {
      out_ += static_cast<char>(v >> (8 * i) & 0xff);
    }
  }
  void integer(int64_t i) {
    if (i >= 0 && i < 256) {
      out_ += 'K';
      out_ += static_cast<char>(i);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      out_ += 'J';
      little(static_cast<uint64_t>(i), 4);
    } else {
      out_ += "\x8a\x08";  // LONG1, 8 bytes
      little(static_cast<uint64_t>(i), 8);
    }
  }
  void str(const std::string& s) {
    out_ += 'X';
    little(s.size(), 4);
    out_ += s;
  }
  void global(const std::string& module, const std::string& name) {
    out_ += 'c' + module + '\n' + name + '\n';
  }
  void items(const std::vector<PyRef>& v) {
    for (const auto& item : v) {
      write(item);
    }
  }
  void write(const PyRef& v) {
    switch (v->kind) {
      case PyValue::Kind::none:
        out_ += 'N';
        return;
      case PyValue::Kind::boolean:
        out_ += v->boolean ? '\x88' : '\x89';
        return;
      case PyValue::Kind::integer:
        integer(v->integer);
        return;
      case PyValue::Kind::floating: {
        uint64_t bits = 0;
        std::memcpy(&bits, &v->floating, 8);
        out_ += 'G';
        for (int i = 7; i >= 0; --i) {
          out_ += static_cast<char>(bits >> (8 * i) & 0xff);
        }
        return;
      }
      case PyValue::Kind::string:
        str(v->text);
        return;
      case PyValue::Kind::list:
        out_ += ']';
        if (!v->items.empty()) {
          out_ += '(';
          items(v->items);
          out_ += 'e';
        }
        return;
      case PyValue::Kind::tuple:
        out_ += '(';
        items(v->items);
        out_ += 't';
        return;
      case PyValue::Kind::dict:
        out_ += '}';
        if (!v->items.empty()) {
          out_ += '(';
          items(v->items);
          out_ += 'u';
        }
        return;
      case PyValue::Kind::tensor:
        tensor(v->tensor);
        return;
      default:
        throw InvalidArgument(
            component::kAccelerator,
            path_ + ": cannot write a " + v->type_name() + " for torch.load.");
    }
  }
  // _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()).
  void tensor(const at::Tensor& t) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(c);
    global("torch._utils", "_rebuild_tensor_v2");
    out_ += '(';
    out_ += '(';  // the persistent id
    str("storage");
    global("torch", storage_name(c.scalar_type(), path_));
    str(key);
    str("cpu");
    integer(c.numel());
    out_ += "tQ";
    integer(0);
    out_ += '(';
    for (int64_t d : c.sizes()) {
      integer(d);
    }
    out_ += "t(";
    for (int64_t d : c.strides()) {
      integer(d);
    }
    out_ += 't';
    out_ += '\x89';
    global("collections", "OrderedDict");
    out_ += ")R";
    out_ += "tR";
  }

  std::string path_;
  std::string out_;
  std::vector<at::Tensor> storages_;
};

}  // namespace

void save_torch_file(const std::string& path, const PyRef& value) {
  Writer writer(path);
  const std::string pickle = writer.pickle(value);
  try {
    caffe2::serialize::PyTorchStreamWriter zip(path);
    zip.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (size_t i = 0; i < writer.storages().size(); ++i) {
      const auto& t = writer.storages()[i];
      zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.nbytes());
    }
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    throw IoError(
        component::kAccelerator,
        "cannot write " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace ampkit::checkpoint
