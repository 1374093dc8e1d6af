// Tessera C++ wrapper: a thin, header-only RAII layer over the C API in tessera/tessera.h.
//
// It adds no behaviour of its own: every call is one C API call. What it adds is ownership and
// error handling in C++ terms:
//   - Model and Context own their C handle, free it in the destructor, and are move-only (a
//     moved-from object holds no handle; using it throws Error with TESSERA_INVALID_ARGUMENT).
//   - Errors are exceptions: every C call that returns a status other than TESSERA_OK throws
//     tessera::api::Error, whose code() is that status and whose what() is tessera_last_error()
//     (the message naming the file, field or value). Exceptions fit here because a failed load
//     has no object to return and RAII constructors have no other way to fail; the C API
//     underneath never aborts the process either way.
//   - A streaming callback may throw: the exception is caught before it reaches the C frames,
//     generation stops, and generate() rethrows it.
// Threading is the C API's: a Model may be shared by contexts; one Context is used by one thread
// at a time. A Context keeps a pointer to its Model's handle: the Model must outlive it.
//
// Names live in tessera::api so that they do not collide with the library's internal C++ types
// (tessera::Model in models/model.h). Needs C++17 and exceptions enabled; a program built with
// -fno-exceptions uses tessera.h directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::api {

// A failed C API call: code() is its tessera_status, what() its message.
class Error : public std::runtime_error {
 public:
  Error(tessera_status code, const std::string& message) : std::runtime_error(message), code_(code) {}
  tessera_status code() const noexcept { return code_; }

 private:
  tessera_status code_;
};

namespace detail {
// Throws Error for |s| != TESSERA_OK, with the message the C API left for this thread.
inline void check(tessera_status s) {
  if (s != TESSERA_OK) throw Error(s, tessera_last_error());
}
template <class T>
T* require(T* handle, const char* what) {
  if (!handle) throw Error(TESSERA_INVALID_ARGUMENT, std::string(what) + ": used after being moved from");
  return handle;
}
}  // namespace detail

inline std::string version() { return tessera_version(); }

using ContextParams = tessera_context_params;    // see tessera.h for the fields
using GenerateParams = tessera_generate_params;  // see tessera.h for the fields and defaults
inline ContextParams default_context_params() { return tessera_context_default_params(); }
inline GenerateParams default_generate_params() { return tessera_generate_default_params(); }

// What Model::load takes beyond the path (tessera_model_params).
struct ModelParams {
  std::string device = "auto";
  int32_t n_threads = 0;        // CPU threads for decode (0: the default)
  int32_t n_threads_batch = 0;  // CPU threads for prefill (0: as n_threads)
};

class Model {
 public:
  // Loads a GGUF model on |device| ("auto" for the best found, else "cpu", "vulkan:1", ...).
  // Throws Error (e.g. TESSERA_NOT_FOUND, TESSERA_DATA_LOSS) naming the file and what is wrong.
  static Model load(const std::string& path, const std::string& device = "auto") {
    tessera_model* m = nullptr;
    detail::check(tessera_model_load(path.c_str(), device.c_str(), &m));
    return Model(m);
  }

  // Loads with parameters: the device and CPU thread counts (0: the defaults; see
  // tessera_model_params). Throws Error (TESSERA_INVALID_ARGUMENT for a negative count).
  static Model load(const std::string& path, const ModelParams& params) {
    tessera_model_params p = tessera_model_default_params();
    p.device = params.device.c_str();
    p.n_threads = params.n_threads;
    p.n_threads_batch = params.n_threads_batch;
    tessera_model* m = nullptr;
    detail::check(tessera_model_load_ex(path.c_str(), &p, &m));
    return Model(m);
  }

  Model(Model&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Model& operator=(Model&& o) noexcept {
    if (this != &o) {
      tessera_model_free(handle_);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { tessera_model_free(handle_); }

  int32_t vocab_size() const { return tessera_model_vocab_size(handle()); }
  int32_t context_length() const { return tessera_model_context_length(handle()); }

  // The token ids of |text|; |add_special| as in tessera_tokenize.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special = true) const {
    size_t n = 0;
    detail::check(tessera_tokenize(handle(), text.c_str(), add_special ? 1 : 0, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    detail::check(tessera_tokenize(handle(), text.c_str(), add_special ? 1 : 0, ids.data(), ids.size(), &n));
    ids.resize(n);
    return ids;
  }

  // The CPU threads the model's device runs with (0 on a GPU).
  int32_t n_threads() const { return tessera_model_n_threads(handle()); }

  // Loads a LoRA adapter (a PEFT folder or a llama.cpp GGUF adapter file) under |name|; returns
  // its slot (Context::set_lora).
  int32_t load_lora(const std::string& name, const std::string& path) {
    int32_t slot = -1;
    detail::check(tessera_model_load_lora(handle(), name.c_str(), path.c_str(), &slot));
    return slot;
  }
  int32_t n_loras() const { return tessera_model_n_loras(handle()); }

  // The C handle, still owned by this object (for C API calls the wrapper does not cover).
  tessera_model* handle() const { return detail::require(handle_, "tessera::api::Model"); }

 private:
  explicit Model(tessera_model* m) : handle_(m) {}
  tessera_model* handle_ = nullptr;
};

// What one generate() call produced.
struct Completion {
  std::string text;             // the whole generated text (UTF-8)
  std::vector<int32_t> tokens;  // every generated token id, in order (an end-of-generation token included)
};

// Called with each piece of generated text and the token that completed it (see
// tessera_token_callback: the text may be empty, and token is -1 for text flushed at the end).
// Return false to stop generating.
using TokenCallback = std::function<bool(std::string_view text, int32_t token)>;

class Context {
 public:
  // A KV cache for |model| (which must outlive this context).
  explicit Context(const Model& model, const ContextParams& params = default_context_params()) {
    detail::check(tessera_context_create(model.handle(), &params, &handle_));
  }
  Context(Context&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Context& operator=(Context&& o) noexcept {
    if (this != &o) {
      tessera_context_free(handle_);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { tessera_context_free(handle_); }

  // Streams a completion of |prompt| through |on_token|. Throws Error when generation fails, or
  // whatever |on_token| threw.
  void generate(const std::string& prompt, const GenerateParams& params, const TokenCallback& on_token) {
    struct Call {
      const TokenCallback* fn;
      std::exception_ptr error;
    } call{&on_token, nullptr};
    const tessera_token_callback trampoline = [](const char* text, size_t length, int32_t token, void* user) -> int {
      auto* c = static_cast<Call*>(user);
      try {
        return (*c->fn)(std::string_view(text, length), token) ? 0 : 1;
      } catch (...) {
        c->error = std::current_exception();  // exceptions must not cross the C frames
        return 1;
      }
    };
    const tessera_status s = tessera_generate(handle(), prompt.c_str(), &params, on_token ? trampoline : nullptr, &call);
    if (call.error) std::rethrow_exception(call.error);
    detail::check(s);
  }

  // The adapter later generations run under (a slot of Model::load_lora; -1: the base model).
  void set_lora(int32_t slot) { detail::check(tessera_context_set_lora(handle(), slot)); }
  void set_lora(int32_t slot, float scale) { detail::check(tessera_context_set_lora_scaled(handle(), slot, scale)); }

  // The whole completion of |prompt| at once.
  Completion generate(const std::string& prompt, const GenerateParams& params = default_generate_params()) {
    Completion out;
    generate(prompt, params, [&out](std::string_view text, int32_t token) {
      out.text.append(text);
      if (token >= 0) out.tokens.push_back(token);
      return true;
    });
    return out;
  }

  tessera_context* handle() const { return detail::require(handle_, "tessera::api::Context"); }

 private:
  tessera_context* handle_ = nullptr;
};

}  // namespace tessera::api
