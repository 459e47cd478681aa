// The pickle machine of torch_pickle.h. Opcodes as CPython's pickle.py and
// pickletools name them.
#include "checkpoint/torch_pickle.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>

#include "ampkit/error.h"
#include "utils/components.h"

namespace ampkit::checkpoint {
namespace {

PyRef make(PyValue::Kind kind) {
  auto v = std::make_shared<PyValue>();
  v->kind = kind;
  return v;
}

// torch.save's storage types (legacy names, which torch 2.x still writes).
at::ScalarType storage_dtype(
    const std::string& name, const std::string& where) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"torch.FloatStorage", at::kFloat},
      {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
  };
  auto it = kTypes.find(name);
  if (it == kTypes.end()) {
    throw IoError(
        component::kAccelerator,
        where + " holds a tensor of storage type " + name +
            ", which ampkit does not read (it reads float, double, half, "
            "bfloat16, int64, int32, int16, int8, uint8 and bool).");
  }
  return it->second;
}

class Machine {
 public:
  Machine(
      const std::string& pickle,
      std::string where,
      const std::function<
          at::Tensor(const std::string&, at::ScalarType, int64_t)>& storage)
      : p_(pickle), where_(std::move(where)), storage_(storage) {}

  PyRef run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80:  // PROTO
          byte();
          break;
        case 0x95:  // FRAME
          take(8);
          break;
        case '.':  // STOP
          return pop();
        case 'N':
          push(make(PyValue::Kind::none));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          auto v = make(PyValue::Kind::boolean);
          v->boolean = op == 0x88;
          push(v);
          break;
        }
        case 'K':
          push_int(byte());
          break;
        case 'M':
          push_int(little(2, false));
          break;
        case 'J':
          push_int(little(4, true));
          break;
        case 0x8a: {  // LONG1
          const size_t n = byte();
          if (n > 8) {
            bad("an integer of more than 64 bits");
          }
          push_int(n == 0 ? 0 : little(n, true));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) {
            bits = bits << 8 | byte();
          }
          auto v = make(PyValue::Kind::floating);
          std::memcpy(&v->floating, &bits, 8);
          push(v);
          break;
        }
        case 'X':  // BINUNICODE
          push_text(PyValue::Kind::string, little(4, false));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          push_text(PyValue::Kind::string, byte());
          break;
        case 0x8d:  // BINUNICODE8
          push_text(PyValue::Kind::string, little(8, false));
          break;
        case 'U':  // SHORT_BINSTRING
        case 'C':  // SHORT_BINBYTES
          push_text(PyValue::Kind::bytes, byte());
          break;
        case 'T':  // BINSTRING
        case 'B':  // BINBYTES
          push_text(PyValue::Kind::bytes, little(4, false));
          break;
        case ')':
          push(make(PyValue::Kind::tuple));
          break;
        case ']':
          push(make(PyValue::Kind::list));
          break;
        case '}':
          push(make(PyValue::Kind::dict));
          break;
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case 't': {  // TUPLE
          auto v = make(PyValue::Kind::tuple);
          v->items = since_mark();
          push(v);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          auto v = make(PyValue::Kind::tuple);
          v->items.resize(op - 0x84);
          for (size_t i = v->items.size(); i-- > 0;) {
            v->items[i] = pop();
          }
          push(v);
          break;
        }
        case 'a': {  // APPEND
          auto item = pop();
          container(PyValue::Kind::list)->items.push_back(item);
          break;
        }
        case 'e': {  // APPENDS
          auto items = since_mark();
          auto& list = container(PyValue::Kind::list)->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM
          auto value = pop();
          auto key = pop();
          auto& dict = container(PyValue::Kind::dict)->items;
          dict.push_back(key);
          dict.push_back(value);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = since_mark();
          auto& dict = container(PyValue::Kind::dict)->items;
          dict.insert(dict.end(), items.begin(), items.end());
          break;
        }
        case 'c': {  // GLOBAL module\nname\n
          const std::string module = line();
          push_global(module + "." + line());
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop();
          auto module = pop();
          push_global(module->text + "." + name->text);
          break;
        }
        case 'R': {  // REDUCE
          auto args = pop();
          auto callable = pop();
          push(call(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          auto args = pop();
          auto cls = pop();
          push(call(cls, args));
          break;
        }
        case 'b': {  // BUILD
          auto state = pop();
          top()->state = state;
          break;
        }
        case 'Q': {  // BINPERSID
          push(persistent(pop()));
          break;
        }
        case 'q':
          memo_[byte()] = top();
          break;
        case 'r':
          memo_[little(4, false)] = top();
          break;
        case 0x94:  // MEMOIZE
          memo_[static_cast<int64_t>(memo_.size())] = top();
          break;
        case 'h':
          push(memo(byte()));
          break;
        case 'j':
          push(memo(little(4, false)));
          break;
        default:
          bad("the pickle opcode 0x" + hex(op));
      }
    }
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw IoError(
        component::kAccelerator,
        where_ + ": ampkit cannot read " + what + " (at byte " +
            std::to_string(pos_) +
            "). It reads what torch.save writes for state dicts: numbers, "
            "strings, lists, tuples, dicts and tensors.");
  }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  uint8_t byte() {
    if (pos_ >= p_.size()) {
      bad("a pickle that ends early");
    }
    return static_cast<uint8_t>(p_[pos_++]);
  }
  std::string take(size_t n) {
    if (n > p_.size() - pos_) {
      bad("a pickle that ends early");
    }
    std::string s = p_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  int64_t little(size_t n, bool is_signed) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      v |= uint64_t(byte()) << (8 * i);
    }
    if (is_signed && n < 8 && (v >> (8 * n - 1) & 1)) {
      v |= ~uint64_t(0) << (8 * n);  // sign-extend
    }
    return static_cast<int64_t>(v);
  }
  std::string line() {
    const auto end = p_.find('\n', pos_);
    if (end == std::string::npos) {
      bad("a GLOBAL without its name");
    }
    std::string s = p_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push(PyRef v) {
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) {
    auto v = make(PyValue::Kind::integer);
    v->integer = i;
    push(v);
  }
  void push_text(PyValue::Kind kind, int64_t n) {
    auto v = make(kind);
    v->text = take(static_cast<size_t>(n));
    push(v);
  }
  void push_global(const std::string& name) {
    auto v = make(PyValue::Kind::global);
    v->text = name;
    push(v);
  }
  PyRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      bad("a pickle whose stack runs empty");
    }
    auto v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PyRef top() {
    if (stack_.empty()) {
      bad("a pickle whose stack runs empty");
    }
    return stack_.back();
  }
  std::vector<PyRef> since_mark() {
    if (marks_.empty()) {
      bad("a pickle without its MARK");
    }
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark);
    return items;
  }
  // The list or dict APPEND/SETITEM adds to; OrderedDict() counts as one.
  PyRef container(PyValue::Kind kind) {
    auto c = top();
    if (c->kind == PyValue::Kind::call &&
        c->items[0]->text == "collections.OrderedDict") {
      c->kind = PyValue::Kind::dict;
      c->items.clear();
    }
    if (c->kind != kind) {
      bad(std::string("an item added to a ") + c->type_name());
    }
    return c;
  }
  PyRef memo(int64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      bad("a memo reference to nothing");
    }
    return it->second;
  }
  PyRef call(const PyRef& callable, const PyRef& args) {
    if (callable->kind == PyValue::Kind::global &&
        callable->text == "torch._utils._rebuild_tensor_v2") {
      return rebuild_tensor(args);
    }
    if (callable->kind == PyValue::Kind::global &&
        callable->text == "collections.OrderedDict" && args->items.empty()) {
      return make(PyValue::Kind::dict);
    }
    auto v = make(PyValue::Kind::call);
    v->items = {callable, args};
    return v;
  }
  // ('storage', torch.FloatStorage, key, location, numel).
  PyRef persistent(const PyRef& id) {
    if (id->kind != PyValue::Kind::tuple || id->items.size() < 5 ||
        id->items[0]->text != "storage") {
      bad("a persistent id other than a tensor storage");
    }
    auto v = make(PyValue::Kind::tensor);
    v->tensor = storage_(
        id->items[2]->text,
        storage_dtype(id->items[1]->text, where_),
        id->items[4]->integer);
    return v;
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks).
  PyRef rebuild_tensor(const PyRef& args) {
    if (args->items.size() < 4 ||
        args->items[0]->kind != PyValue::Kind::tensor) {
      bad("a tensor rebuilt from other than a storage");
    }
    auto ints = [&](const PyRef& t) {
      std::vector<int64_t> out;
      for (const auto& i : t->items) {
        out.push_back(i->integer);
      }
      return out;
    };
    auto v = make(PyValue::Kind::tensor);
    v->tensor = args->items[0]
                    ->tensor
                    .as_strided(
                        ints(args->items[2]),
                        ints(args->items[3]),
                        args->items[1]->integer)
                    .clone();
    return v;
  }

  const std::string& p_;
  std::string where_;
  const std::function<at::Tensor(const std::string&, at::ScalarType, int64_t)>&
      storage_;
  size_t pos_ = 0;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::map<int64_t, PyRef> memo_;
};

}  // namespace

PyRef PyValue::get(const std::string& key) const {
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind == Kind::string && items[i]->text == key) {
      return items[i + 1];
    }
  }
  return nullptr;
}

PyRef PyValue::get(int64_t key) const {
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind == Kind::integer && items[i]->integer == key) {
      return items[i + 1];
    }
  }
  return nullptr;
}

std::string PyValue::type_name() const {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::list:
      return "list";
    case Kind::tuple:
      return "tuple";
    case Kind::dict:
      return "dict";
    case Kind::global:
      return text;
    case Kind::call:
      return items[0]->text + "(...)";
    case Kind::tensor:
      return "tensor";
  }
  return "?";
}

PyRef unpickle(
    const std::string& pickle,
    const std::string& where,
    const std::function<
        at::Tensor(const std::string&, at::ScalarType, int64_t)>& storage) {
  return Machine(pickle, where, storage).run();
}

PyRef load_torch_file(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pickle;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    auto [data, size] = reader->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    throw IoError(
        component::kAccelerator,
        "cannot read " + path + " as a torch.save file (zip format): " +
            e.what_without_backtrace() +
            ". Save it with torch.save (PyTorch 1.6 or later).");
  }
  auto storage = [&](const std::string& key, at::ScalarType dtype, int64_t n) {
    try {
      auto [data, size] = reader->getRecord("data/" + key);
      const int64_t bytes = n * static_cast<int64_t>(c10::elementSize(dtype));
      if (static_cast<int64_t>(size) != bytes) {
        throw IoError(
            component::kAccelerator,
            path + ": storage data/" + key + " holds " + std::to_string(size) +
                " bytes, its header says " + std::to_string(bytes) + ".");
      }
      auto t = at::empty({n}, at::TensorOptions().dtype(dtype));
      std::memcpy(t.data_ptr(), data.get(), size);
      return t;
    } catch (const c10::Error& e) {
      throw IoError(
          component::kAccelerator,
          path + ": cannot read the storage data/" + key + ": " +
              e.what_without_backtrace());
    }
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
  switch (dtype) {
    case at::kFloat:
      return "FloatStorage";
    case at::kDouble:
      return "DoubleStorage";
    case at::kHalf:
      return "HalfStorage";
    case at::kBFloat16:
      return "BFloat16Storage";
    case at::kLong:
      return "LongStorage";
    case at::kInt:
      return "IntStorage";
    case at::kShort:
      return "ShortStorage";
    case at::kChar:
      return "CharStorage";
    case at::kByte:
      return "ByteStorage";
    case at::kBool:
      return "BoolStorage";
    default:
      throw InvalidArgument(
          component::kAccelerator,
          path + ": cannot write a tensor of dtype " +
              std::string(c10::toString(dtype)) + " for torch.load.");
  }
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
