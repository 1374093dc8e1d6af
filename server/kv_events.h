// KV events: the prefix cache's content, published over ZeroMQ in vLLM's format
// (vllm/distributed/kv_events.py) so a KV-aware router (llm-d's KV-cache manager, vllm-router's
// kv_aware policy) can track which replica holds which prefix. docs/scale-out.md states the
// wire format and the block-hash contract.
//
// Wire: a PUB socket sends one message per batch, three frames
//   [topic, sequence number (u64 big-endian, from 0), msgpack payload]
// payload = [timestamp (float64, seconds since the epoch), [event...], data-parallel rank (0)]
//   ["BlockStored", [block_hash...], parent_block_hash or nil, [token_id...], block_size,
//    lora_id or nil, "GPU"(, lora_name when an adapter)]
//   ["BlockRemoved", [block_hash...], "GPU"]
//   ["AllBlocksCleared"]   (the first event after start: this process's cache is empty)
// The optional replay socket (ROUTER) answers a request [empty, start seq (8 bytes big-endian)]
// with [empty, seq, payload] for each buffered batch from start on, then [empty, -1 (8 bytes), ""].
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/kv/block_pool.h"
#include "core/status.h"

namespace tessera::server {

struct KvEventsOptions {
  std::string endpoint;         // the PUB socket's address, e.g. tcp://127.0.0.1:5557
  bool connect = false;         // connect to |endpoint| (a central subscriber binds) instead of binding it
  std::string replay_endpoint;  // the ROUTER socket for replays, bound ("" none)
  std::string topic;            // the first frame of every message
  int32_t block_size = 16;      // the KV cache's block size (every BlockStored states it)
  size_t replay_batches = 10000;  // batches kept for replay
  // The name of the LoRA adapter with id |lora_id| (> 0) that BlockStored events carry; called
  // on the engine thread (inside the pool's calls). Unset: events carry the id alone.
  std::function<std::string(int32_t lora_id)> lora_name;
};

// A BlockEventSink that queues the pool's events (engine thread, never blocks on I/O) and sends
// them in batches from a thread of its own, every few milliseconds.
class KvEventPublisher : public BlockEventSink {
 public:
  // Binds (or connects) the sockets and starts the thread. Unavailable when an address cannot be
  // used, or when Tessera was built without libzmq.
  static Result<std::unique_ptr<KvEventPublisher>> start(const KvEventsOptions& opts);
  // Sends what is queued, then stops the thread and closes the sockets.
  ~KvEventPublisher() override;

  void on_block_stored(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id) override;
  void on_block_removed(BlockHash hash) override;

  struct Impl;

 private:
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
