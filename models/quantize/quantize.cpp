// Running a quantisation plan: decode rows to f32, encode them in the planned format, split
// across threads, and write the GGUF.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "models/quantize/quantize.h"

namespace tessera {

namespace {

constexpr int64_t kRowsPerChunk = 32;

// Progress shared by the worker threads; the callback runs under the lock.
struct Progress {
  std::mutex mu;
  int64_t done = 0, total = 0;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  void add(int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    done += n;
    if (fn && *fn) (*fn)(done, total);
  }
};

// Every decoded value must be finite: rows [row0, row0 + n) of |p| in |x|.
Status check_finite(const TensorSource& src, const TensorPlan& p, int64_t row0, int64_t n, const float* x) {
  const int64_t cols = p.shape.back();
  for (int64_t i = 0; i < n * cols; ++i) {
    if (!std::isfinite(x[i]))
      return InvalidArgument(src.path() + ": tensor '" + p.name + "': row " + std::to_string(row0 + i / cols) +
                             ", column " + std::to_string(i % cols) + " is " + std::to_string(x[i]) + " (not finite)");
  }
  return OkStatus();
}

// Encodes rows [row0, row0 + n) of |p| into |dst| (their place in the output tensor).
Status encode_rows(const TensorSource& src, const TensorPlan& p, int64_t row0, int64_t n, std::vector<float>* buf,
                   uint8_t* dst) {
  const int64_t cols = p.shape.back();
  buf->resize(size_t(n * cols));
  TS_RETURN_IF_ERROR(src.read_rows(p.index, row0, n, buf->data()));
  const DTypeTraits& tr = dtype_traits(p.to);
  const int64_t row_bytes = dtype_row_bytes(p.to, cols);
  TS_RETURN_IF_ERROR(check_finite(src, p, row0, n, buf->data()));
  for (int64_t r = 0; r < n; ++r) tr.quantize_row(buf->data() + r * cols, dst + r * row_bytes, cols);
  return OkStatus();
}

// One tensor's output bytes: copied when the format does not change, else encoded by up to
// |threads| threads taking chunks of rows in turn.
Status convert_tensor(const TensorSource& src, const TensorPlan& p, int threads, Progress* progress,
                      std::vector<uint8_t>* out) {
  const SourceTensor& s = src.tensors()[p.index];
  const int64_t rows = s.rows(), cols = s.cols();
  out->assign(size_t(p.out_bytes), 0);
  const void* raw = src.raw_data(p.index);
  if (p.to == p.from && raw) {
    std::memcpy(out->data(), raw, out->size());
    progress->add(rows * cols);
    return OkStatus();
  }
  if (!dtype_traits(p.to).quantize_row || !dtype_traits(p.from).dequantize_row)
    return InvalidArgument(src.path() + ": tensor '" + p.name + "': cannot convert " + dtype_name(p.from) + " to " +
                           dtype_name(p.to));
  const int64_t row_bytes = dtype_row_bytes(p.to, cols);
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  Status first_error;
  auto worker = [&] {
    std::vector<float> buf;
    for (int64_t c = next++; c < chunks; c = next++) {
      const int64_t r0 = c * kRowsPerChunk, n = std::min(kRowsPerChunk, rows - r0);
      Status st = encode_rows(src, p, r0, n, &buf, out->data() + r0 * row_bytes);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.ok()) first_error = std::move(st);
        next = chunks;  // stop the others early
        return;
      }
      progress->add(n * cols);
    }
  };
  const int n_threads = int(std::clamp<int64_t>(chunks, 1, threads));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first_error;
}

// GPTQ factors, shared by the tensors that read the same input (q/k/v, gate/up): computed on first
// use and dropped after the last, so at most a layer's worth is held.
class FactorCache {
 public:
  FactorCache(const std::vector<TensorPlan>& plan, const QuantizeOptions& o) {
    for (const TensorPlan& p : plan)
      if (uses_gptq(p, o)) ++uses_[o.calib->find(p.name)];
  }
  Result<std::shared_ptr<const GptqFactor>> get(const Hessian* h, const std::string& what, int threads) {
    std::shared_ptr<const GptqFactor>& e = cache_[h];
    if (!e) {
      TS_ASSIGN_OR_RETURN(GptqFactor f, gptq_factor(*h, what, 0.01, threads));
      e = std::make_shared<const GptqFactor>(std::move(f));
    }
    std::shared_ptr<const GptqFactor> out = e;
    if (--uses_[h] <= 0) cache_.erase(h);
    return out;
  }

 private:
  std::map<const Hessian*, int> uses_;
  std::map<const Hessian*, std::shared_ptr<const GptqFactor>> cache_;
};

// One tensor written with GPTQ from its input statistics |h|: the whole matrix is decoded, swept
// column by column (rows split across threads inside gptq_quantize), and encoded.
Status gptq_tensor(const TensorSource& src, const TensorPlan& p, const Hessian& h, FactorCache* factors, int threads,
                   Progress* progress, std::vector<uint8_t>* out) {
  const SourceTensor& s = src.tensors()[p.index];
  const int64_t rows = s.rows(), cols = s.cols();
  const std::string what = src.path() + ": tensor '" + p.name + "'";
  if (h.k != cols)
    return InvalidArgument(what + ": calibration saw inputs of " + std::to_string(h.k) + " elements, rows have " +
                           std::to_string(cols));
  std::vector<float> w(size_t(rows * cols));
  TS_RETURN_IF_ERROR(src.read_rows(p.index, 0, rows, w.data()));
  TS_RETURN_IF_ERROR(check_finite(src, p, 0, rows, w.data()));
  TS_ASSIGN_OR_RETURN(auto f, factors->get(&h, what, threads));
  out->assign(size_t(p.out_bytes), 0);
  int64_t reported = 0;
  return gptq_quantize(p.to, *f, w.data(), rows, cols, out->data(), threads, [&](int64_t done) {
    progress->add((done - reported) * cols);
    reported = done;
  });
}

bool is_rewritten_key(const std::string& k) {
  return k == "general.alignment" || k == "general.file_type" || k == "general.quantization_version";
}

// Source metadata, with the keys that describe the file's encoding rewritten for |o.type|.
Status copy_metadata(const TensorSource& src, const QuantizeOptions& o, gguf::Writer* w) {
  for (const auto& [key, value] : src.metadata()) {
    if (key == "general.alignment") {
      if (!value.is_integer() || value.u == 0 || (value.u & (value.u - 1)) != 0 || value.u > gguf::kMaxAlignment)
        return InvalidArgument(src.path() + ": general.alignment is not a power of two <= " +
                               std::to_string(gguf::kMaxAlignment));
      w->set_alignment(uint32_t(value.u));
    }
    if (!is_rewritten_key(key)) w->add(key, value);
  }
  // A private format has no LLAMA_FTYPE: leaving the key out beats a stale or invented value.
  if (auto ft = llama_file_type(o.type)) w->add_u32("general.file_type", *ft);
  if (dtype_traits(o.type).is_quantized) w->add_u32("general.quantization_version", 2);
  return OkStatus();
}

// Fails early, before minutes of work, when |out_path| is the input or cannot be created.
Status check_output(const TensorSource& src, const std::string& out_path, const std::string& tmp_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out_path, ec) && fs::equivalent(out_path, src.path(), ec))
    return InvalidArgument(out_path + ": is the input file; write the quantised model elsewhere");
  std::FILE* f = std::fopen(tmp_path.c_str(), "wb");
  if (!f) return Unavailable(out_path + ": cannot create '" + tmp_path + "': " + std::strerror(errno));
  std::fclose(f);
  return OkStatus();
}

}  // namespace

bool uses_gptq(const TensorPlan& p, const QuantizeOptions& o) {
  return o.calib && o.calib->find(p.name) && p.shape.size() == 2 && gptq_supports(p.to) &&
         p.name != "token_embd.weight";
}

Result<QuantizeStats> quantize_model(const TensorSource& src, const std::vector<TensorPlan>& plan,
                                     const QuantizeOptions& o, const std::string& out_path) {
  const auto start = std::chrono::steady_clock::now();
  Progress progress;
  progress.fn = &o.progress;
  for (const TensorPlan& p : plan) {
    if (p.index >= src.tensors().size() || src.tensors()[p.index].name != p.name)
      return InvalidArgument(out_path + ": plan entry '" + p.name + "' does not match " + src.path() + "'s tensors");
    const SourceTensor& s = src.tensors()[p.index];
    progress.total += s.rows() * s.cols();
  }
  const std::string tmp_path = out_path + ".part";
  TS_RETURN_IF_ERROR(check_output(src, out_path, tmp_path));
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  gguf::Writer w;
  Status st = copy_metadata(src, o, &w);
  std::vector<uint8_t> bytes;
  FactorCache factors(plan, o);
  int gptq_tensors = 0;
  for (size_t i = 0; st.ok() && i < plan.size(); ++i) {
    const TensorPlan& p = plan[i];
    if (uses_gptq(p, o)) {
      st = gptq_tensor(src, p, *o.calib->find(p.name), &factors, threads, &progress, &bytes);
      ++gptq_tensors;
    } else {
      st = convert_tensor(src, p, threads, &progress, &bytes);
    }
    if (st.ok()) st = w.add_tensor(p.name, p.to, p.shape, bytes.data(), bytes.size());
  }
  if (st.ok()) st = w.write(tmp_path);
  std::error_code ec;
  if (st.ok()) {
    std::filesystem::rename(tmp_path, out_path, ec);
    if (ec) st = Unavailable(out_path + ": cannot rename '" + tmp_path + "' to it: " + ec.message());
  }
  if (!st.ok()) {
    std::filesystem::remove(tmp_path, ec);
    return st;
  }
  QuantizeStats stats;
  stats.bytes_out = int64_t(std::filesystem::file_size(out_path, ec));
  stats.gptq_tensors = gptq_tensors;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace tessera
