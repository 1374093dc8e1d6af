// libFuzzer target for model loading from GGUF: the whole path of Model::load (the reader, the
// config from the {arch}.* metadata, the tokenizer from tokenizer.ggml.*, the tensor specs, the
// shape checks, binding the weights on a device) and then one decode step of one token, so
// shapes that pass the loader but not the graph are found too. Seeds are tiny models (dim 8,
// one or two layers) so each input runs in well under a millisecond. The input is written to a
// file in the scratch folder, since loading maps a path.
#include <cstdint>

#include "core/reference/reference.h"
#include "models/model.h"
#include "tests/fuzz/fuzz_util.h"

namespace tessera {
namespace {

void decode_one(Model& m) {
  auto kv = m.create_kv_cache(16);
  if (!kv.ok()) return;
  StepPlan p;
  p.tokens = {0};
  p.positions = {0};
  p.slot_mapping = {0};
  p.query_start = {0, 1};
  p.seq_lens = {1};
  p.block_tables = {0};
  p.max_blocks = 1;
  p.logit_rows = {0};
  std::vector<float> logits;
  const Status s = m.forward(p, **kv, &logits);
  fuzz::note("forward", s);
  if (s.ok() && logits.size() != size_t(m.vocab_size()))
    fuzz::fail("forward returned " + std::to_string(logits.size()) + " logits for vocab " + std::to_string(m.vocab_size()));
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  static const std::string path = fuzz::scratch_dir() + "/model.gguf";
  static const DevicePtr device = std::make_shared<ref::ReferenceDevice>();
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  LoadOptions opts;
  opts.max_batch_tokens = 16;
  opts.max_seqs = 2;
  auto m = Model::load(path, device, opts);
  fuzz::note("load", m.status());
  if (!m.ok()) return 0;
  if ((*m)->weight_tensors().empty()) fuzz::fail("a model loaded without weights");
  decode_one(**m);
  return 0;
}
