// Model::weight_tensors() lists every weight a model loaded: for tiny models of each tensor
// layout (dense, QK-norm, q/k/v biases, routed and shared experts) the names and bytes it reports
// are exactly the file's tensors. A weight the family binds but the model does not list fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/reference/reference.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

TEST(WeightList, EveryTensorOfTheFileIsListed) {
  const std::string dir = testing::process_temp_dir("tessera_weight_list");
  // llama: dense; qwen3: QK-norm; qwen2moe: biases and a shared expert; olmoe: full QK-norm.
  for (const char* arch : {"llama", "qwen3", "mixtral", "qwen2moe", "olmoe"}) {
    SCOPED_TRACE(arch);
    const std::string path = dir + "/" + arch + ".gguf";
    ASSERT_EQ(testing::run_make_tiny_model(std::string("--arch ") + arch + " --dtype q8_0 --seed 3 --out " + path), "");
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    std::map<std::string, size_t> in_file;
    for (const gguf::TensorInfo& t : (*f)->tensors()) in_file[t.name] = t.nbytes;
    auto m = Model::load(path, std::make_shared<ref::ReferenceDevice>());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::map<std::string, size_t> listed;
    for (const Tensor* t : (*m)->weight_tensors()) {
      EXPECT_TRUE(listed.emplace(t->name, size_t(t->nbytes())).second) << "listed twice: " << t->name;
    }
    for (const auto& [name, bytes] : in_file)
      if (!listed.count(name)) ADD_FAILURE() << name << " (" << bytes << " bytes) is missing from weight_tensors()";
    EXPECT_EQ(listed, in_file);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
