/* Tessera C API: a stable ABI for embedding a model in an application.
 *
 * Thread-safety: a tessera_model may be shared by contexts; one context must be used by one
 * thread at a time. Errors: every function returning tessera_status leaves a message for
 * tessera_last_error() (per thread). Strings are UTF-8. Nothing here aborts the process. */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tessera_status {
  TESSERA_OK = 0,
  TESSERA_INVALID_ARGUMENT = 1,
  TESSERA_OUT_OF_RANGE = 2,
  TESSERA_UNIMPLEMENTED = 3,
  TESSERA_UNAVAILABLE = 4,
  TESSERA_RESOURCE_EXHAUSTED = 5,
  TESSERA_DATA_LOSS = 6,
  TESSERA_NOT_FOUND = 7,
  TESSERA_CANCELLED = 8,
  TESSERA_INTERNAL = 9
} tessera_status;

typedef struct tessera_model tessera_model;
typedef struct tessera_context tessera_context;

/* The message of the last failed call on this thread ("" if none). Valid until the next call. */
const char* tessera_last_error(void);
/* "0.1.0" */
const char* tessera_version(void);

/* Loads a GGUF model. |device|: NULL or "auto" for the best device found, else "cpu",
 * "vulkan", "vulkan:1", "cuda:0", ... */
tessera_status tessera_model_load(const char* path, const char* device, tessera_model** out);
/* Parameters of tessera_model_load_ex. |struct_size| is sizeof(tessera_model_params) as the
 * caller was compiled (tessera_model_default_params sets it): fields are only ever added at the
 * end, and the library reads no field past |struct_size| (those keep their defaults), so a
 * program built against an older header keeps working. */
typedef struct tessera_model_params {
  uint32_t struct_size;
  const char* device;        /* NULL or "auto": the best found; else "cpu", "vulkan:1", ... */
  /* CPU threads for decode. 0: the default (TESSERA_THREADS if set, else the physical cores).
   * Negative: TESSERA_INVALID_ARGUMENT. More than the CPUs this process may run on: clamped to
   * them. Under load from other programs the CPU uses fewer while that is faster (set
   * TESSERA_CPU_ADAPT=0 to keep them all). Ignored by GPU devices. The thread count belongs to
   * the model, not the context: contexts share the model's device and its threads. */
  int32_t n_threads;
  int32_t n_threads_batch;   /* CPU threads for prefill; 0: as n_threads */
} tessera_model_params;
tessera_model_params tessera_model_default_params(void);
/* tessera_model_load with parameters (|params| NULL: the defaults). */
tessera_status tessera_model_load_ex(const char* path, const tessera_model_params* params, tessera_model** out);
/* The CPU threads |model|'s device runs with (the most any op uses); 0 for a GPU device or a
 * vocab-only model. */
int32_t tessera_model_n_threads(const tessera_model* model);

/* Loads only the tokenizer of a .gguf file (a vocab-only GGUF works) or a checkpoint
 * directory: tessera_tokenize and tessera_model_vocab_size work on it, tessera_context_create
 * refuses it, and tessera_model_context_length is 0. */
tessera_status tessera_model_load_vocab(const char* path, tessera_model** out);
void tessera_model_free(tessera_model* model);
int32_t tessera_model_vocab_size(const tessera_model* model);
int32_t tessera_model_context_length(const tessera_model* model);

/* LoRA adapters (docs/lora.md). Loads the PEFT adapter folder |path| (adapter_config.json,
 * adapter_model.safetensors), or the llama.cpp GGUF adapter when |path| is a file, under |name|
 * into the next slot of |model| and stores the slot in |*slot| (may be NULL). Errors name what
 * does not fit (another architecture or size, a missing tensor, a name loaded twice). Load
 * adapters before creating contexts that use them. */
tessera_status tessera_model_load_lora(tessera_model* model, const char* name, const char* path, int32_t* slot);
/* Adapters loaded, and the name of the one in |slot| (NULL when out of range). */
int32_t tessera_model_n_loras(const tessera_model* model);
const char* tessera_model_lora_name(const tessera_model* model, int32_t slot);

/* Tokenizes |text|. Writes at most |capacity| ids into |ids| and stores the total count in
 * |*n_ids| (call with capacity 0 to size the buffer). |add_special|: BOS etc. as the model
 * wants, and special tokens written in the text become their ids. */
tessera_status tessera_tokenize(const tessera_model* model, const char* text, int add_special, int32_t* ids,
                                size_t capacity, size_t* n_ids);

typedef struct tessera_context_params {
  int32_t kv_tokens;   /* KV cache capacity in tokens (0: 4096) */
} tessera_context_params;
tessera_context_params tessera_context_default_params(void);
tessera_status tessera_context_create(tessera_model* model, const tessera_context_params* params,
                                      tessera_context** out);
void tessera_context_free(tessera_context* ctx);

/* The adapter the next generations on |ctx| run under: a slot of tessera_model_load_lora, or -1
 * for the base model (the default). Contexts of one model may each use another adapter; their
 * K/V are never shared across adapters. */
tessera_status tessera_context_set_lora(tessera_context* ctx, int32_t slot);
/* The same at |scale| times the adapter's own scale (llama.cpp's per-request scale; finite; 0 is
 * the base model). An adapter at another scale keeps K/V of its own. */
tessera_status tessera_context_set_lora_scaled(tessera_context* ctx, int32_t slot, float scale);

typedef struct tessera_generate_params {
  int32_t max_tokens;        /* default 256 */
  float temperature;         /* 0: greedy; default 0.8 */
  int32_t top_k;             /* default 40 */
  float top_p;               /* default 0.95 */
  float min_p;               /* default 0.05 */
  uint64_t seed;             /* 0: random */
  int use_chat_template;     /* non-zero: |prompt| is one user message rendered with the model's
                                own chat template (default 1) */
} tessera_generate_params;
tessera_generate_params tessera_generate_default_params(void);

/* Called once per generated token with |token| and the text it completes (complete UTF-8; empty
 * when the token ends inside a multi-byte character, whose bytes come with a later token, and
 * for the end-of-generation token), and at the end with |token| -1 when text held back until
 * then is flushed. Return non-zero to stop early. */
typedef int (*tessera_token_callback)(const char* text, size_t length, int32_t token, void* user_data);

/* Generates a completion of |prompt|, streaming it through |callback| (may be NULL). */
tessera_status tessera_generate(tessera_context* ctx, const char* prompt, const tessera_generate_params* params,
                                tessera_token_callback callback, void* user_data);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TESSERA_TESSERA_H_ */
