#include "core/kv/kv_cache.h"

#include <string>

namespace tessera {

Result<std::unique_ptr<KvCache>> KvCache::create(Device& device, const KvCacheConfig& cfg) {
  if (cfg.n_layers <= 0 || cfg.n_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.block_size <= 0 || cfg.n_blocks <= 0)
    return InvalidArgument("kv cache: every dimension must be positive (layers " + std::to_string(cfg.n_layers) +
                           ", kv heads " + std::to_string(cfg.n_kv_heads) + ", head dim " + std::to_string(cfg.head_dim) +
                           ", block size " + std::to_string(cfg.block_size) + ", blocks " + std::to_string(cfg.n_blocks) + ")");
  // 8-bit caches keep an f32 scale per (token, kv head) row of head_dim values: one row is
  // written at once (a token's K or V for one head), so its scale is known when it is stored and
  // never changes; a coarser (per block) scale would have to be fixed before the block's later
  // tokens exist.
  const bool quant8 = cfg.dtype == DType::kFP8_E4M3 || cfg.dtype == DType::kINT8_PC;
  if (!dtype_traits(cfg.dtype).is_float && !quant8)
    return InvalidArgument(std::string("kv cache: dtype must be f32, f16, bf16, fp8_e4m3 or int8_pc, got ") +
                           dtype_name(cfg.dtype));
  if (const std::string bad = dtype_row_check(cfg.dtype, cfg.head_dim); !bad.empty())
    return InvalidArgument("kv cache: head dim " + std::to_string(cfg.head_dim) + ": " + bad);
  std::unique_ptr<KvCache> kv(new KvCache(device, cfg));
  const Tensor desc = Tensor::make(cfg.dtype, {cfg.n_blocks, cfg.block_size, cfg.n_kv_heads, cfg.head_dim});
  for (int l = 0; l < cfg.n_layers; ++l) {
    for (auto* vec : {&kv->k_, &kv->v_}) {
      Tensor t = desc;
      t.name = std::string(vec == &kv->k_ ? "k_cache." : "v_cache.") + std::to_string(l);
      auto buf = device.alloc(size_t(t.nbytes()));
      if (!buf.ok())
        return Status(buf.status().code(), "kv cache: layer " + std::to_string(l) + ": " + buf.status().message());
      t.buffer = *buf;
      vec->push_back(std::move(t));
    }
  }
  return kv;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const auto& t : k_) b += t.nbytes();
  for (const auto& t : v_) b += t.nbytes();
  return b;
}

}  // namespace tessera

namespace tessera {

Status KvCache::copy_block(BlockId src, BlockId dst) {
  if (src < 0 || dst < 0 || src >= cfg_.n_blocks || dst >= cfg_.n_blocks)
    return InvalidArgument("kv cache: copy_block(" + std::to_string(src) + ", " + std::to_string(dst) + ") outside [0, " +
                           std::to_string(cfg_.n_blocks) + ")");
  Tensor block = Tensor::make(cfg_.dtype, {1, cfg_.block_size, cfg_.n_kv_heads, cfg_.head_dim});
  const size_t bytes = size_t(block.nbytes());
  std::vector<char> host(bytes);
  for (const auto* vec : {&k_, &v_}) {
    for (const Tensor& t : *vec) {
      Tensor from = block, to = block;
      from.buffer = to.buffer = t.buffer;
      from.offset = t.offset + size_t(src) * bytes;
      to.offset = t.offset + size_t(dst) * bytes;
      TS_RETURN_IF_ERROR(device_.download(from, host.data(), bytes));
      TS_RETURN_IF_ERROR(device_.upload(to, host.data(), bytes));
    }
  }
  return OkStatus();
}

}  // namespace tessera
