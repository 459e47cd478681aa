// The pickle machine of torch_pickle.h. Opcodes as CPython's pickle.py and
// pickletools name them. A checkpoint is often a file from elsewhere, so
// nothing in it is trusted: only the globals torch.save writes for tensors
// and state dicts are read, every tensor is checked against its storage
// with overflow-checked arithmetic before it is built, nesting is bounded,
// and a value can no longer change once it is inside another, so no value
// holds itself (no cycle that reference counting would never free).
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

#include "ampkit/error.h"
#include "checkpoint/torch_pickle.h"
#include "utils/components.h"
#include "utils/strings.h"

namespace ampkit::checkpoint {

const std::vector<std::pair<std::string, at::ScalarType>>& storage_types() {
  // torch.save's storage types (legacy names, which torch 2.x still writes).
  static const std::vector<std::pair<std::string, at::ScalarType>> kTypes = {
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
  return kTypes;
}

namespace {

// Deeper than any state dict (an optimizer's is 4, NumPy's random state
// inside accelerate's random_states 7), shallow enough that tearing a
// value down, which recurses, never nears the stack's end.
constexpr int kMaxPickleDepth = 64;

constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr const char* kOrderedDict = "collections.OrderedDict";

// What torch.save writes for tensors and state dicts, and what NumPy's
// random state in accelerate's random_states_<i>.pkl needs (kept as
// opaque calls); as torch.load's weights_only allows, nothing else.
bool allowed_global(const std::string& name) {
  static const char* const kAllowed[] = {
      kRebuildTensor,
      kRebuildParameter,
      kOrderedDict,
      "_codecs.encode",  // bytes, in protocol 2
      "numpy.core.multiarray._reconstruct",
      "numpy._core.multiarray._reconstruct",
      "numpy.core.multiarray.scalar",
      "numpy._core.multiarray.scalar",
      "numpy.ndarray",
      "numpy.dtype",
  };
  for (const char* a : kAllowed) {
    if (name == a) {
      return true;
    }
  }
  for (const auto& [type, dtype] : storage_types()) {
    if (name == type) {
      return true;
    }
  }
  return false;
}

std::string allowed_list() {
  std::string out = std::string(kRebuildTensor) + ", " + kRebuildParameter +
                    ", " + kOrderedDict +
                    ", torch.<Type>Storage, _codecs.encode and "
                    "NumPy's array, dtype and scalar";
  return out;
}

// a * b and a + b, or nothing where they overflow int64.
bool mul_overflows(int64_t a, int64_t b, int64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}
bool add_overflows(int64_t a, int64_t b, int64_t& out) {
  return __builtin_add_overflow(a, b, &out);
}

class Machine {
 public:
  Machine(
      const std::string& pickle, std::string where, const StorageFn& storage)
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
          for (auto& item : since_mark()) {
            insert(v, std::move(item));
          }
          push(v);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          std::vector<PyRef> items(op - 0x84);
          for (size_t i = items.size(); i-- > 0;) {
            items[i] = pop();
          }
          auto v = make(PyValue::Kind::tuple);
          for (auto& item : items) {
            insert(v, std::move(item));
          }
          push(v);
          break;
        }
        case 'a': {  // APPEND
          auto item = pop();
          insert(container(PyValue::Kind::list), std::move(item));
          break;
        }
        case 'e': {  // APPENDS
          auto items = since_mark();
          auto list = container(PyValue::Kind::list);
          for (auto& item : items) {
            insert(list, std::move(item));
          }
          break;
        }
        case 's': {  // SETITEM
          auto value = pop();
          auto key = pop();
          auto dict = container(PyValue::Kind::dict);
          insert(dict, std::move(key));
          insert(dict, std::move(value));
          break;
        }
        case 'u': {  // SETITEMS
          auto items = since_mark();
          if (items.size() % 2 != 0) {
            bad("a SETITEMS with a key but no value");
          }
          auto dict = container(PyValue::Kind::dict);
          for (auto& item : items) {
            insert(dict, std::move(item));
          }
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
          if (module->kind != PyValue::Kind::string ||
              name->kind != PyValue::Kind::string) {
            bad("a STACK_GLOBAL whose module and name are not strings");
          }
          push_global(module->text + "." + name->text);
          break;
        }
        case 'R':     // REDUCE
        case 0x81: {  // NEWOBJ
          auto args = pop();
          auto callable = pop();
          push(call(callable, args));
          break;
        }
        case 'b': {  // BUILD
          auto state = pop();
          insert_state(top(), std::move(state));
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
  // What the machine knows of a value beyond PyValue: how deep it nests,
  // and whether it is inside another (then it may no longer change).
  struct Node {
    int depth = 1;
    bool sealed = false;
  };

  [[noreturn]] void bad(const std::string& what) const {
    throw IoError(
        component::kAccelerator,
        ampkit::detail::str(
            where_,
            ": ampkit cannot read ",
            what,
            " (at byte ",
            pos_,
            "). It reads what torch.save writes for state dicts: numbers, "
            "strings, lists, tuples, dicts and tensors."));
  }
  [[noreturn]] void bad_tensor(const std::string& what) const {
    throw IoError(
        component::kAccelerator,
        ampkit::detail::str(
            where_,
            ": a tensor (at byte ",
            pos_,
            ") ",
            what,
            ". The file is damaged or was not written by torch.save; save "
            "the state again with torch.save."));
  }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  PyRef make(PyValue::Kind kind) {
    auto v = std::make_shared<PyValue>();
    v->kind = kind;
    nodes_[v.get()] = Node{};
    // Kept until the machine ends, so that no address is reused while
    // nodes_ names it.
    made_.push_back(v);
    return v;
  }
  Node& node(const PyRef& v) {
    return nodes_.at(v.get());
  }
  // `item` goes into `into`, which must still be free to change; `item`
  // no longer is.
  void insert(const PyRef& into, PyRef item) {
    adopt(into, item);
    into->items.push_back(std::move(item));
  }
  // BUILD's state goes into `into` likewise.
  void insert_state(const PyRef& into, PyRef state) {
    adopt(into, state);
    into->state = std::move(state);
  }
  // `into` takes `item` in: `into` must still be free to change and not be
  // `item`; `item` is sealed, and `into` nests one deeper than it.
  void adopt(const PyRef& into, const PyRef& item) {
    if (into == item) {
      bad(std::string("a ") + into->type_name() + " that holds itself");
    }
    if (node(into).sealed) {
      bad(std::string("a ") + into->type_name() +
          " changed after it was put inside another value (a value that "
          "refers to itself)");
    }
    Node& inner = node(item);
    Node& outer = node(into);
    inner.sealed = true;
    outer.depth = std::max(outer.depth, inner.depth + 1);
    if (outer.depth > kMaxPickleDepth) {
      bad(ampkit::detail::str(
          "values nested more than ",
          kMaxPickleDepth,
          " deep (no state dict nests so deep)"));
    }
  }
  uint8_t byte() {
    if (pos_ >= p_.size()) {
      bad("a pickle that ends early");
    }
    return static_cast<uint8_t>(p_[pos_++]);
  }
  std::string take(uint64_t n) {
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
    v->text = take(static_cast<uint64_t>(n));
    push(v);
  }
  void push_global(const std::string& name) {
    if (!allowed_global(name)) {
      bad("the global " + name +
          ", which torch.save does not write for tensors and state dicts "
          "(ampkit reads only " +
          allowed_list() +
          ", as torch.load(weights_only=True) does; nothing in the file "
          "ran)");
    }
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
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
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
    if (c->kind == PyValue::Kind::call && !node(c).sealed &&
        c->items[0]->text == kOrderedDict) {
      c->kind = PyValue::Kind::dict;
      c->items.clear();
      node(c).depth = 1;
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
    if (callable->kind != PyValue::Kind::global) {
      bad("a call of a " + callable->type_name() +
          " (only globals are called)");
    }
    if (args->kind != PyValue::Kind::tuple) {
      bad("a call of " + callable->text + " whose arguments are a " +
          args->type_name() + ", not a tuple");
    }
    if (callable->text == kRebuildTensor) {
      return rebuild_tensor(args);
    }
    if (callable->text == kRebuildParameter) {
      // _rebuild_parameter(data, requires_grad, backward_hooks): the data.
      if (args->items.empty() ||
          args->items[0]->kind != PyValue::Kind::tensor) {
        bad("a parameter rebuilt from other than a tensor");
      }
      return args->items[0];
    }
    if (callable->text == kOrderedDict && args->items.empty()) {
      return make(PyValue::Kind::dict);
    }
    auto v = make(PyValue::Kind::call);
    insert(v, callable);
    insert(v, args);
    return v;
  }
  // ('storage', torch.FloatStorage, key, location, numel): one storage per
  // key however often it is named, as torch.load shares it.
  PyRef persistent(const PyRef& id) {
    const auto& f = id->items;
    if (id->kind != PyValue::Kind::tuple || f.size() < 5 ||
        f[0]->kind != PyValue::Kind::string || f[0]->text != "storage" ||
        f[1]->kind != PyValue::Kind::global ||
        f[2]->kind != PyValue::Kind::string ||
        f[4]->kind != PyValue::Kind::integer) {
      bad("a persistent id other than a tensor storage");
    }
    const at::ScalarType dtype = storage_dtype(f[1]->text);
    const std::string& key = f[2]->text;
    const int64_t numel = f[4]->integer;
    const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
    int64_t bytes = 0;
    if (numel < 0 || mul_overflows(numel, itemsize, bytes)) {
      bad_tensor(ampkit::detail::str(
          "names the storage data/", key, " of ", numel, " elements"));
    }
    auto found = storages_.find(key);
    if (found != storages_.end()) {
      const at::Tensor& t = found->second->tensor;
      if (t.scalar_type() != dtype || t.numel() != numel) {
        bad_tensor(ampkit::detail::str(
            "names the storage data/",
            key,
            " as ",
            numel,
            " ",
            c10::toString(dtype),
            " elements, which it named as ",
            t.numel(),
            " ",
            c10::toString(t.scalar_type()),
            " before"));
      }
      return found->second;
    }
    at::Tensor t = storage_(key, dtype, numel);
    if (!t.defined() || t.scalar_type() != dtype || t.dim() != 1 ||
        t.numel() != numel || !t.is_contiguous() || t.storage_offset() != 0) {
      bad_tensor(ampkit::detail::str(
          "has no storage data/", key, " of ", numel, " elements"));
    }
    auto v = make(PyValue::Kind::storage);
    v->tensor = std::move(t);
    storages_[key] = v;
    return v;
  }
  at::ScalarType storage_dtype(const std::string& name) const {
    for (const auto& [type, dtype] : storage_types()) {
      if (name == type) {
        return dtype;
      }
    }
    throw IoError(
        component::kAccelerator,
        where_ + " holds a tensor of storage type " + name +
            ", which ampkit does not read (it reads float, double, half, "
            "bfloat16, int64, int32, int16, int8, uint8 and bool).");
  }
  std::vector<int64_t> ints(const PyRef& t, const char* what) const {
    if (t->kind != PyValue::Kind::tuple) {
      bad_tensor(ampkit::detail::str(
          "has ", what, " that are a ", t->type_name(), ", not a tuple"));
    }
    std::vector<int64_t> out;
    for (const auto& i : t->items) {
      if (i->kind != PyValue::Kind::integer || i->integer < 0) {
        bad_tensor(ampkit::detail::str(
            "has ",
            what,
            " other than integers of 0 or more (",
            i->kind == PyValue::Kind::integer ? std::to_string(i->integer)
                                              : "a " + i->type_name(),
            ")"));
      }
      out.push_back(i->integer);
    }
    return out;
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
  // as a view of the storage, as torch.load makes it, once every element
  // it reaches is known to lie inside the storage.
  PyRef rebuild_tensor(const PyRef& args) {
    const auto& a = args->items;
    if (a.size() < 4 || a[0]->kind != PyValue::Kind::storage) {
      bad("a tensor rebuilt from other than a storage");
    }
    if (a[1]->kind != PyValue::Kind::integer || a[1]->integer < 0) {
      bad_tensor("has a storage offset that is not an integer of 0 or more");
    }
    const at::Tensor& storage = a[0]->tensor;
    const int64_t offset = a[1]->integer;
    const std::vector<int64_t> sizes = ints(a[2], "sizes");
    const std::vector<int64_t> strides = ints(a[3], "strides");
    if (sizes.size() != strides.size()) {
      bad_tensor(ampkit::detail::str(
          "has ", sizes.size(), " sizes but ", strides.size(), " strides"));
    }
    int64_t numel = 1;
    for (int64_t s : sizes) {
      if (mul_overflows(numel, s, numel)) {
        bad_tensor("has more elements than an int64 counts");
      }
    }
    // The last element it reaches: offset + sum((size - 1) * stride).
    int64_t last = offset;
    for (size_t d = 0; numel > 0 && d < sizes.size(); ++d) {
      int64_t step = 0;
      if (mul_overflows(sizes[d] - 1, strides[d], step) ||
          add_overflows(last, step, last)) {
        bad_tensor("reaches past what an int64 counts");
      }
    }
    const int64_t held = storage.numel();
    if (numel > 0 ? last >= held : offset > held) {
      bad_tensor(ampkit::detail::str(
          "of sizes ",
          c10::IntArrayRef(sizes),
          ", strides ",
          c10::IntArrayRef(strides),
          " and offset ",
          offset,
          " reaches element ",
          last,
          " of a storage of ",
          held));
    }
    if (numel > held) {
      bad_tensor(ampkit::detail::str(
          "of ",
          numel,
          " elements repeats those of its storage of ",
          held,
          " (an expand()ed tensor). Save t.contiguous() instead"));
    }
    auto v = make(PyValue::Kind::tensor);
    v->tensor = storage.as_strided(sizes, strides, offset);
    return v;
  }

  const std::string& p_;
  std::string where_;
  const StorageFn& storage_;
  size_t pos_ = 0;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::map<int64_t, PyRef> memo_;
  std::map<std::string, PyRef> storages_;
  std::unordered_map<const PyValue*, Node> nodes_;
  std::vector<PyRef> made_;
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
      return items.empty() ? "call" : items[0]->text + "(...)";
    case Kind::storage:
      return "storage";
    case Kind::tensor:
      return "tensor";
  }
  return "?";
}

PyRef unpickle(
    const std::string& pickle,
    const std::string& where,
    const StorageFn& storage) {
  try {
    return Machine(pickle, where, storage).run();
  } catch (const c10::Error& e) {
    // Every check above runs before ATen sees a value; should one still
    // fail in ATen, it is this file's fault, and says so.
    throw IoError(
        component::kAccelerator,
        where + ": cannot read a tensor of it: " + e.what_without_backtrace());
  }
}

}  // namespace ampkit::checkpoint
