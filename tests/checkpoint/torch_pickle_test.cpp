// torch.save's format, written and read back by ampkit's own pickle code
// (checkpoint/torch_pickle.h), and hostile files (issue 45) that must each
// be an ampkit error naming the file, in the reader and through
// load_state; Python's torch.load reading it is
// crosscheck_accelerate_checkpoint's part.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ampkit/accelerator/accelerator.h"
#include "ampkit/error.h"
#include "checkpoint/torch_pickle.h"
#include "test_util.h"

namespace ampkit::checkpoint {
namespace {

using namespace std::string_literals;  // pickles hold NUL bytes

class TorchPickleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ampkit_pickle_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(TorchPickleTest, ValuesAndTensorsRoundTrip) {
  const auto strided = torch::arange(12, torch::kFloat).reshape({3, 4}).t();
  const auto value = py_dict(
      {py_str("state"),
       py_dict(
           {py_int(0),
            py_dict(
                {py_str("step"),
                 py_tensor(torch::tensor(20.0f)),
                 py_str("moment"),
                 py_tensor(strided)})}),
       py_str("numbers"),
       py_list(
           {py_int(-1),
            py_int(255),
            py_int(256),
            py_int(int64_t(1) << 40),
            py_int(-(int64_t(1) << 40)),
            py_float(-2.5e-8),
            py_bool(true),
            py_none()}),
       py_str("pair"),
       py_tuple({py_float(0.9), py_float(0.999)}),
       py_str("empty"),
       py_list({}),
       py_str("bytes"),
       py_tensor(torch::tensor({1, 2, 255}, torch::kByte)),
       py_str("halves"),
       py_tensor(torch::ones({2}, torch::kBFloat16))});
  const auto path = (dir_ / "state.bin").string();
  save_torch_file(path, value);
  const PyRef back = load_torch_file(path);

  const PyRef step = back->get("state")->get(int64_t{0})->get("step");
  ASSERT_EQ(step->kind, PyValue::Kind::tensor);
  EXPECT_EQ(step->tensor.item<float>(), 20.0f);
  const auto moment =
      back->get("state")->get(int64_t{0})->get("moment")->tensor;
  EXPECT_TRUE(moment.equal(strided));
  const auto& numbers = back->get("numbers")->items;
  ASSERT_EQ(numbers.size(), 8u);
  EXPECT_EQ(numbers[0]->integer, -1);
  EXPECT_EQ(numbers[1]->integer, 255);
  EXPECT_EQ(numbers[2]->integer, 256);
  EXPECT_EQ(numbers[3]->integer, int64_t(1) << 40);
  EXPECT_EQ(numbers[4]->integer, -(int64_t(1) << 40));
  EXPECT_EQ(numbers[5]->floating, -2.5e-8);
  EXPECT_TRUE(numbers[6]->boolean);
  EXPECT_EQ(numbers[7]->kind, PyValue::Kind::none);
  EXPECT_EQ(back->get("pair")->kind, PyValue::Kind::tuple);
  EXPECT_EQ(back->get("pair")->items[1]->floating, 0.999);
  EXPECT_TRUE(back->get("empty")->items.empty());
  EXPECT_TRUE(back->get("bytes")->tensor.equal(
      torch::tensor({1, 2, 255}, torch::kByte)));
  EXPECT_EQ(back->get("halves")->tensor.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(back->get("missing"), nullptr);
}

TEST_F(TorchPickleTest, WhatIsNotTorchSaveIsAnIoErrorNamingTheFile) {
  const auto path = (dir_ / "not_a_zip.bin").string();
  std::ofstream(path) << "plain text";
  AMPKIT_EXPECT_THROWS_WITH(
      load_torch_file(path),
      IoError,
      "cannot read " + path + " as a torch.save");
  // A pickle cut short, and one with an opcode outside the subset.
  auto storage = [](const std::string&, at::ScalarType, int64_t) {
    return at::Tensor();
  };
  AMPKIT_EXPECT_THROWS_WITH(
      unpickle(std::string("\x80\x02}(X", 5), "cut.pkl", storage),
      IoError,
      "cut.pkl: ampkit cannot read a pickle that ends early");
  AMPKIT_EXPECT_THROWS_WITH(
      unpickle(std::string("\x80\x02I1\n.", 6), "int.pkl", storage),
      IoError,
      "the pickle opcode 0x49");
}

TEST_F(TorchPickleTest, EmptyTensorsLoadWithTheirShape) {
  const auto path = (dir_ / "empty.bin").string();
  save_torch_file(
      path,
      py_dict(
          {py_str("none"),
           py_tensor(torch::zeros({0, 3})),
           py_str("one"),
           py_tensor(torch::ones({2, 2}))}));
  const PyRef back = load_torch_file(path);
  EXPECT_EQ(back->get("none")->tensor.sizes(), torch::IntArrayRef({0, 3}));
  EXPECT_TRUE(back->get("one")->tensor.equal(torch::ones({2, 2})));
}

// The fuzzer's seeds (bench/fuzz/make_torch_seeds.py): real torch.save
// files of torch 1.13 and 2.11 (a model's, an optimizer's, a scheduler's
// and a GradScaler's state dicts, accelerate's random states with NumPy's)
// load whole, and their data.pkl alone, after the selector byte.
TEST_F(TorchPickleTest, RealTorchSaveFilesOfBothVersionsLoad) {
  int files = 0;
  for (const auto& seed :
       std::filesystem::directory_iterator(AMPKIT_FUZZ_SEEDS)) {
    const std::string name = seed.path().filename().string();
    if (name.rfind("torch", 0) != 0) {
      continue;
    }
    SCOPED_TRACE(name);
    const std::string bytes =
        ampkit::testing_util::read_file(seed.path()).substr(1);
    PyRef value;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, "_pt") == 0) {
      const auto path = (dir_ / name).string();
      std::ofstream(path, std::ios::binary) << bytes;
      ASSERT_NO_THROW(value = load_torch_file(path));
      ++files;
    } else {
      auto zeros = [](const std::string&, at::ScalarType dtype, int64_t n) {
        return torch::zeros({n}, torch::dtype(dtype));
      };
      ASSERT_NO_THROW(value = unpickle(bytes, name, zeros));
    }
    ASSERT_EQ(value->kind, PyValue::Kind::dict);
    if (name.find("optimizer_pt") != std::string::npos) {
      const PyRef state = value->get("state")->get(int64_t{0});
      ASSERT_NE(state, nullptr);
      EXPECT_EQ(state->get("exp_avg")->kind, PyValue::Kind::tensor);
    }
    if (name.find("random_states_pt") != std::string::npos) {
      EXPECT_EQ(value->get("torch_manual_seed")->tensor.numel(), 16);
      EXPECT_EQ(value->get("numpy_random_seed")->kind, PyValue::Kind::tuple);
    }
  }
  EXPECT_EQ(files, 12);  // six state dicts of each version
}

// Pickle opcodes as torch.save writes them, for hand-made hostile files.
std::string long8(int64_t v) {  // LONG1 of 8 bytes: any int64
  std::string s = "\x8a\x08";
  for (int i = 0; i < 8; ++i) {
    s += static_cast<char>(static_cast<uint64_t>(v) >> (8 * i) & 0xff);
  }
  return s;
}
std::string unicode(const std::string& text) {  // BINUNICODE
  std::string s = "X";
  for (int i = 0; i < 4; ++i) {
    s += static_cast<char>(text.size() >> (8 * i) & 0xff);
  }
  return s + text;
}
std::string int_tuple(const std::vector<int64_t>& values) {
  std::string s = "(";
  for (int64_t v : values) {
    s += long8(v);
  }
  return s + "t";
}
// _rebuild_tensor_v2(('storage', torch.FloatStorage, '0', 'cpu', numel),
// offset, sizes, strides, False, OrderedDict()), as a whole pickle.
std::string tensor_pickle(
    int64_t numel,
    int64_t offset,
    const std::vector<int64_t>& sizes,
    const std::vector<int64_t>& strides) {
  return "\x80\x02"
         "ctorch._utils\n_rebuild_tensor_v2\n((" +
         unicode("storage") + "ctorch\nFloatStorage\n" + unicode("0") +
         unicode("cpu") + long8(numel) + "tQ" + long8(offset) +
         int_tuple(sizes) + int_tuple(strides) +
         "\x89"
         "ccollections\nOrderedDict\n)RtR.";
}

// A zip as torch.save writes it, with `pickle` as data.pkl and 16 bytes
// (four floats) as the storage data/0.
void write_torch_zip(const std::string& path, const std::string& pickle) {
  caffe2::serialize::PyTorchStreamWriter zip(path);
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  const float storage[4] = {1, 2, 3, 4};
  zip.writeRecord("data/0", storage, sizeof(storage));
  zip.writeEndOfFile();
}

struct Hostile {
  std::string name;
  std::string pickle;  // empty: hostile_zip writes the file
  std::string message;
};

// Each hostile file the issue lists, with what the refusal says.
std::vector<Hostile> hostile_files() {
  const int64_t kBig = (int64_t(1) << 62) + (int64_t(1) << 61);
  return {
      {"offset_overflow",
       tensor_pickle(4, kBig, {1}, {1}),
       "reaches element 6917529027641081856 of a storage of 4"},
      {"size_beyond_storage",
       tensor_pickle(4, 0, {5}, {1}),
       "reaches element 4 of a storage of 4"},
      {"stride_beyond_storage",
       tensor_pickle(4, 2, {2}, {2}),
       "reaches element 4 of a storage of 4"},
      {"sizes_and_strides_differ",
       tensor_pickle(4, 0, {2, 2}, {1}),
       "has 2 sizes but 1 strides"},
      {"negative_stride",
       tensor_pickle(4, 3, {2}, {-1}),
       "strides other than integers of 0 or more (-1)"},
      {"negative_size",
       tensor_pickle(4, 0, {-2}, {1}),
       "sizes other than integers of 0 or more (-2)"},
      {"numel_overflow",
       tensor_pickle(4, 0, {int64_t(1) << 32, int64_t(1) << 32}, {0, 0}),
       "has more elements than an int64 counts"},
      {"stride_zero_4_4_terabytes",
       tensor_pickle(4, 0, {int64_t(1) << 40}, {0}),
       "of 1099511627776 elements repeats those of its storage of 4"},
      {"stride_zero_that_fits",
       tensor_pickle(4, 0, {100000000}, {0}),
       "repeats those of its storage"},
      {"storage_bytes_overflow",
       tensor_pickle(int64_t(1) << 62, 0, {1}, {1}),
       "names the storage data/0 of 4611686018427387904 elements"},
      {"storage_bigger_than_its_record",
       tensor_pickle(5, 0, {5}, {1}),
       "storage data/0 holds 16 bytes, its header says 20"},
      {"nested_lists",
       "\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + ".",
       "values nested more than 64 deep"},
      {"nested_tuples",
       "\x80\x02)" + std::string(100000, '\x85') + ".",
       "values nested more than 64 deep"},
      {"list_appended_to_itself",
       "\x80\x02]q\x00h\x00"
       "a."s,
       "a list that holds itself"},
      {"cycle_through_a_tuple",
       "\x80\x02]q\x00h\x00\x85"
       "a."s,
       "a list changed after it was put inside another value"},
      {"build_sets_itself",
       "\x80\x02]q\x00h\x00"
       "b."s,
       "a list that holds itself"},
      {"os_system",
       "\x80\x02"
       "cposix\nsystem\n(" +
           unicode("id") + "tR.",
       "the global posix.system, which torch.save does not write"},
      // A valid file whose directory record of data.pkl is changed at
      // the byte and to the bytes zip_patches gives.
      {"zip_claims_4_gib", "", "claims 4294967294 bytes, more than the whole"},
      {"zip_crc_differs", "", "data.pkl does not match its CRC-32"},
      {"zip_entry_compressed", "", "data.pkl is compressed (method 8)"},
      {"zip_entry_encrypted", "", "data.pkl is encrypted"},
  };
}

// Where (in data.pkl's central directory record) and what each zip_ file
// of hostile_files() changes.
std::pair<size_t, std::string> zip_patch(const std::string& name) {
  if (name == "zip_claims_4_gib") {
    return {24, "\xfe\xff\xff\xff"};  // uncompressed size
  }
  if (name == "zip_crc_differs") {
    return {16, "\x01\x02\x03\x04"};
  }
  if (name == "zip_entry_compressed") {
    return {10, "\x08"};  // deflated
  }
  return {8, "\x01"};  // general purpose flags: encrypted
}

void write_hostile(const std::string& path, const Hostile& h) {
  if (!h.pickle.empty()) {
    write_torch_zip(path, h.pickle);
    return;
  }
  save_torch_file(path, py_dict({py_str("x"), py_int(1)}));
  std::string bytes = ampkit::testing_util::read_file(path);
  const auto [offset, patch] = zip_patch(h.name);
  size_t at = 0;
  while ((at = bytes.find("PK\x01\x02", at)) != std::string::npos) {
    const size_t name_len = static_cast<uint8_t>(bytes[at + 28]) |
                            static_cast<uint8_t>(bytes[at + 29]) << 8;
    if (bytes.compare(at + 46 + name_len - 8, 8, "data.pkl") == 0) {
      bytes.replace(at + offset, patch.size(), patch);
      break;
    }
    at += 4;
  }
  ASSERT_NE(at, std::string::npos) << "no data.pkl in " << path;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(TorchPickleTest, HostileFilesAreIoErrorsNamingTheFile) {
  for (const Hostile& h : hostile_files()) {
    SCOPED_TRACE(h.name);
    const auto path = (dir_ / (h.name + ".bin")).string();
    write_hostile(path, h);
    AMPKIT_EXPECT_THROWS_WITH(load_torch_file(path), IoError, path);
    AMPKIT_EXPECT_THROWS_WITH(load_torch_file(path), IoError, h.message);
  }
}

TEST_F(TorchPickleTest, ATensorIsAViewOfItsStorageWithinBounds) {
  const auto path = (dir_ / "view.bin").string();
  write_torch_zip(path, tensor_pickle(4, 1, {3}, {1}));
  const PyRef t = load_torch_file(path);
  ASSERT_EQ(t->kind, PyValue::Kind::tensor);
  EXPECT_TRUE(t->tensor.equal(torch::tensor({2.0f, 3.0f, 4.0f})));
  write_torch_zip(path, tensor_pickle(4, 0, {2, 2}, {1, 2}));
  EXPECT_TRUE(load_torch_file(path)->tensor.equal(
      torch::tensor({1.0f, 3.0f, 2.0f, 4.0f}).reshape({2, 2})));
}

TEST_F(TorchPickleTest, LoadStateRefusesHostileFilesAndChangesNothing) {
  torch::nn::Linear lin(4, 1);
  torch::optim::SGD sgd(
      lin->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ampkit::Accelerator acc(ampkit::AcceleratorOptions().cpu(true).quiet(true));
  auto [model, opt] = acc.prepare(lin, sgd);
  lin(torch::ones({2, 4})).sum().backward();
  opt.step();
  const auto dir = (dir_ / "accelerate").string();
  acc.save_state(dir, ampkit::SaveFormat::accelerate);
  {
    torch::NoGradGuard no_grad;
    lin->weight.fill_(7);
  }
  const double lr = sgd.param_groups()[0].options().get_lr();
  std::filesystem::copy_file(dir + "/optimizer.bin", dir + "/kept.bin");
  for (const Hostile& h : hostile_files()) {
    SCOPED_TRACE(h.name);
    std::filesystem::copy_file(
        dir + "/kept.bin",
        dir + "/optimizer.bin",
        std::filesystem::copy_options::overwrite_existing);
    write_hostile(dir + "/optimizer.bin", h);
    AMPKIT_EXPECT_THROWS_WITH(
        acc.load_state(dir), ampkit::Error, dir + "/optimizer.bin");
    EXPECT_TRUE(lin->weight.eq(7).all().item<bool>());
    EXPECT_EQ(sgd.param_groups()[0].options().get_lr(), lr);
  }
  // The weights as pytorch_model.bin, hostile too.
  std::filesystem::copy_file(
      dir + "/kept.bin",
      dir + "/optimizer.bin",
      std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(dir + "/kept.bin");
  std::filesystem::remove(dir + "/model.safetensors");
  for (const Hostile& h : hostile_files()) {
    SCOPED_TRACE(h.name);
    write_hostile(dir + "/pytorch_model.bin", h);
    AMPKIT_EXPECT_THROWS_WITH(
        acc.load_state(dir), ampkit::Error, dir + "/pytorch_model.bin");
    EXPECT_TRUE(lin->weight.eq(7).all().item<bool>());
  }
}

}  // namespace
}  // namespace ampkit::checkpoint
