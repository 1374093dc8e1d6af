#include "server/kv_events.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server/msgpack.h"

#if TESSERA_HAVE_ZMQ
#include <zmq.h>
#endif

namespace tessera::server {

namespace {

struct Event {
  enum Kind { kStored, kRemoved, kCleared } kind;
  std::vector<BlockHash> hashes;
  BlockHash parent = 0;         // kStored: 0 for none
  std::vector<int32_t> tokens;  // kStored: every block's tokens, in order
  int32_t lora_id = 0;          // kStored: the adapter the blocks were computed under (0: none)
  std::string lora_name;        // kStored: its name (KvEventsOptions::lora_name)
};

// [timestamp, [events], dp_rank] in msgpack (kv_events.h).
[[maybe_unused]] std::string encode_batch(const std::vector<Event>& events, int32_t block_size) {
  std::string out;
  msgpack::array(out, 3);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  msgpack::float64(out, now);
  msgpack::array(out, events.size());
  for (const Event& e : events) {
    if (e.kind == Event::kCleared) {
      msgpack::array(out, 1);
      msgpack::str(out, "AllBlocksCleared");
      continue;
    }
    const bool stored = e.kind == Event::kStored;
    // vLLM's BlockStored omits trailing defaults: lora_name only follows medium when set.
    const bool named = stored && e.lora_id != 0 && !e.lora_name.empty();
    msgpack::array(out, stored ? (named ? 8 : 7) : 3);
    msgpack::str(out, stored ? "BlockStored" : "BlockRemoved");
    msgpack::array(out, e.hashes.size());
    for (BlockHash h : e.hashes) msgpack::u64(out, h);
    if (stored) {
      if (e.parent == 0) msgpack::nil(out);
      else msgpack::u64(out, e.parent);
      msgpack::array(out, e.tokens.size());
      for (int32_t t : e.tokens) msgpack::u64(out, uint64_t(uint32_t(t)));
      msgpack::u64(out, uint64_t(block_size));
      if (e.lora_id == 0) msgpack::nil(out);  // lora_id: nil for the base model
      else msgpack::u64(out, uint64_t(uint32_t(e.lora_id)));
    }
    msgpack::str(out, "GPU");  // medium: the device's KV cache, the tier routers credit in full
    if (named) msgpack::str(out, e.lora_name);
  }
  msgpack::u64(out, 0);  // data-parallel rank
  return out;
}

[[maybe_unused]] std::string seq_bytes(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(seq >> (8 * (7 - i))));
  return s;
}

}  // namespace

struct KvEventPublisher::Impl {
  KvEventsOptions opts;
  std::mutex mu;
  std::vector<Event> pending;  // guarded by mu
  bool stop = false;           // guarded by mu
  std::thread thread;
  // The thread's own (it alone touches the sockets).
  void* zctx = nullptr;
  void* pub = nullptr;
  void* replay = nullptr;
  uint64_t next_seq = 0;
  std::deque<std::pair<uint64_t, std::string>> sent;  // for replays

  void push(Event e) {
    std::lock_guard<std::mutex> lock(mu);
    // A chain of blocks stored one after another becomes one event (as vLLM sends a prompt's).
    if (e.kind == Event::kStored && !pending.empty() && pending.back().kind == Event::kStored &&
        pending.back().hashes.back() == e.parent && pending.back().lora_id == e.lora_id) {
      Event& last = pending.back();
      last.hashes.push_back(e.hashes[0]);
      last.tokens.insert(last.tokens.end(), e.tokens.begin(), e.tokens.end());
      return;
    }
    if (e.kind == Event::kRemoved && !pending.empty() && pending.back().kind == Event::kRemoved) {
      pending.back().hashes.push_back(e.hashes[0]);
      return;
    }
    pending.push_back(std::move(e));
  }

#if TESSERA_HAVE_ZMQ
  Status open() {
    zctx = zmq_ctx_new();
    if (!zctx) return Unavailable(std::string("--kv-events: zmq_ctx_new: ") + zmq_strerror(zmq_errno()));
    pub = zmq_socket(zctx, ZMQ_PUB);
    const int hwm = 100000, linger = 500;
    zmq_setsockopt(pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(pub, ZMQ_LINGER, &linger, sizeof(linger));
    const int rc = opts.connect ? zmq_connect(pub, opts.endpoint.c_str()) : zmq_bind(pub, opts.endpoint.c_str());
    if (rc != 0)
      return Unavailable("--kv-events: cannot " + std::string(opts.connect ? "connect to" : "bind") + " '" + opts.endpoint +
                         "': " + zmq_strerror(zmq_errno()));
    if (!opts.replay_endpoint.empty()) {
      replay = zmq_socket(zctx, ZMQ_ROUTER);
      zmq_setsockopt(replay, ZMQ_LINGER, &linger, sizeof(linger));
      if (zmq_bind(replay, opts.replay_endpoint.c_str()) != 0)
        return Unavailable("--kv-events-replay: cannot bind '" + opts.replay_endpoint + "': " + zmq_strerror(zmq_errno()));
    }
    return OkStatus();
  }

  void close() {
    if (replay) zmq_close(replay);
    if (pub) zmq_close(pub);
    if (zctx) zmq_ctx_term(zctx);
    replay = pub = zctx = nullptr;
  }

  static void send_frames(void* sock, std::initializer_list<std::string_view> frames) {
    size_t i = 0;
    for (std::string_view f : frames) {
      const int more = ++i < frames.size() ? ZMQ_SNDMORE : 0;
      zmq_send(sock, f.data(), f.size(), more);
    }
  }

  void publish(const std::vector<Event>& events) {
    std::string payload = encode_batch(events, opts.block_size);
    const uint64_t seq = next_seq++;
    send_frames(pub, {opts.topic, seq_bytes(seq), payload});  // PUB never blocks: past the HWM it drops
    sent.emplace_back(seq, std::move(payload));
    if (sent.size() > opts.replay_batches) sent.pop_front();
  }

  // One replay request: [identity, (empty,) start seq].
  void serve_replay() {
    std::vector<std::string> frames;
    for (int more = 1; more && frames.size() < 8;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, replay, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    if (frames.size() < 2 || frames.back().size() != 8) return;  // not a replay request: ignored
    uint64_t start = 0;
    for (unsigned char c : frames.back()) start = (start << 8) | c;
    const bool delimited = frames.size() >= 3;
    auto reply = [&](std::string_view seq, std::string_view payload) {
      if (delimited) send_frames(replay, {frames[0], "", seq, payload});
      else send_frames(replay, {frames[0], seq, payload});
    };
    for (const auto& [seq, payload] : sent)
      if (seq >= start) reply(seq_bytes(seq), payload);
    reply(std::string(8, '\xff'), "");  // the end: -1
  }

  void loop() {
    for (;;) {
      if (replay) {
        zmq_pollitem_t item{replay, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 5) > 0) serve_replay();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::vector<Event> batch;
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu);
        batch.swap(pending);
        stopping = stop;
      }
      if (!batch.empty()) publish(batch);
      if (stopping) return;
    }
  }
#else
  Status open() { return Unavailable("--kv-events: this build has no libzmq (install libzmq3-dev and reconfigure)"); }
  void close() {}
  void loop() {}
#endif
};

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const KvEventsOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  if (Status s = impl->open(); !s.ok()) {
    impl->close();
    return s;
  }
  impl->pending.push_back(Event{Event::kCleared, {}, 0, {}});  // a fresh process holds nothing
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->loop(); });
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->close();
}

void KvEventPublisher::on_block_stored(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens,
                                       int32_t lora_id) {
  std::string name = lora_id != 0 && impl_->opts.lora_name ? impl_->opts.lora_name(lora_id) : std::string();
  impl_->push(Event{
      Event::kStored, {hash}, parent, std::vector<int32_t>(tokens.begin(), tokens.end()), lora_id, std::move(name)});
}

void KvEventPublisher::on_block_removed(BlockHash hash) { impl_->push(Event{Event::kRemoved, {hash}, 0, {}, 0, {}}); }

}  // namespace tessera::server
