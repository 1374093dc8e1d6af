// tessera-bench serve's client against the stream shapes of the servers it drives: per-token
// logprobs (tessera serve, vLLM: `logprobs.tokens`; the chat-style `logprobs.content`) and none
// (llama-server answers `"logprobs": null`, one chunk per token), from a loopback fake server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bench/serve_client.h"

namespace tessera::bench {
namespace {

// Serves /v1/completions as an SSE stream of |events| (each one `data: ...`), then stops.
class FakeServer {
 public:
  explicit FakeServer(std::vector<std::string> events) : events_(std::move(events)) {
    svr_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        for (const std::string& e : events_) {
          const std::string s = "data: " + e + "\n\n";
          sink.write(s.data(), s.size());
        }
        sink.done();
        return true;
      });
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    svr_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::vector<std::string> events_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

StreamResult run(const std::vector<std::string>& events) {
  FakeServer s(events);
  StreamRequest req;
  req.prompt = {1, 2, 3, 4};
  req.max_tokens = 3;
  return stream_completion("127.0.0.1", s.port(), req, nullptr, nullptr, 30);
}

const char* kUsage3 = R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}})";

TEST(ServeClient, CountsLlamaServerChunksWithoutLogprobs) {
  // llama-server 0.3.36's shape: a chunk per token (empty text while bytes of a character are
  // held back), then one with empty text, finish_reason and usage that is no token.
  const StreamResult r = run({R"({"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":null}]})",
                              R"({"choices":[{"text":"é","index":0,"logprobs":null,"finish_reason":null}]})",
                              R"({"choices":[{"text":"lo","index":0,"logprobs":null,"finish_reason":null}]})",
                              R"({"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],)"
                              R"("usage":{"completion_tokens":3,"prompt_tokens":4,"total_tokens":7}})",
                              "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.counted_by_text);
  EXPECT_EQ(r.token_times.size(), 3u);
  EXPECT_EQ(r.completion_tokens, 3);
  EXPECT_EQ(r.text, "\xc3\xa9lo");
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(ServeClient, CountsATokenThatArrivesWithTheFinishReason) {
  // OpenAI's shape: the last token's text and finish_reason in one chunk.
  const StreamResult r = run({R"({"choices":[{"text":"a","logprobs":null,"finish_reason":null}]})",
                              R"({"choices":[{"text":"b","logprobs":null,"finish_reason":null}]})",
                              R"({"choices":[{"text":"c","logprobs":null,"finish_reason":"length"}]})", kUsage3, "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.token_times.size(), 3u);
  EXPECT_EQ(r.text, "abc");
}

TEST(ServeClient, AcceptsTextChunksThatCarrySeveralTokens) {
  // Two tokens flushed in one chunk (a held-back UTF-8 sequence): usage counts 3, the stream 2.
  const StreamResult r = run({R"({"choices":[{"text":"a","logprobs":null}]})",
                              R"({"choices":[{"text":"\u00e9b","logprobs":null,"finish_reason":"length"}]})", kUsage3,
                              "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.token_times.size(), 2u);
  EXPECT_TRUE(r.counted_by_text);
}

TEST(ServeClient, RejectsUsageBelowTheChunksItStreamed) {
  const StreamResult r = run({R"({"choices":[{"text":"a","logprobs":null}]})", R"({"choices":[{"text":"b","logprobs":null}]})",
                              R"({"choices":[{"text":"c","logprobs":null}]})",
                              R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}})", "[DONE]"});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("usage says 2"), std::string::npos) << r.error;
}

TEST(ServeClient, CountsPerTokenLogprobsIncludingHeldBackText) {
  // vLLM / tessera serve: a token whose text is held back still has its logprobs entry.
  const StreamResult r = run({R"({"choices":[{"text":"","logprobs":{"tokens":["\u00e2"],"token_logprobs":[-0.1]}}]})",
                              R"({"choices":[{"text":"xy","logprobs":{"tokens":["x","y"],"token_logprobs":[-0.2,-0.3]}}]})",
                              kUsage3, "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.counted_by_text);
  EXPECT_EQ(r.token_times.size(), 3u);
  ASSERT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.tokens[1], "x");
}

TEST(ServeClient, IgnoresTextChunksWithoutLogprobsInAStreamThatHasThem) {
  // A server with per-token logprobs may still send a chunk without them (a last flush): it is
  // no token, whatever its text.
  const StreamResult r = run({R"({"choices":[{"text":"a","logprobs":{"tokens":["a"]}}]})",
                              R"({"choices":[{"text":"b","logprobs":{"tokens":["b"]}}]})",
                              R"({"choices":[{"text":"c","logprobs":{"tokens":["c"]}}]})",
                              R"({"choices":[{"text":"","finish_reason":null}]})", kUsage3, "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.counted_by_text);
  EXPECT_EQ(r.token_times.size(), 3u);
}

TEST(ServeClient, CountsChatStyleLogprobContent) {
  const StreamResult r = run({R"({"choices":[{"text":"ab","logprobs":{"content":[{"token":"a","logprob":-1},{"token":"b","logprob":-1}]}}]})",
                              R"({"choices":[{"text":"c","logprobs":{"content":[{"token":"c","logprob":-1}]}}]})", kUsage3,
                              "[DONE]"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.token_times.size(), 3u);
  EXPECT_EQ(r.tokens[2], "c");
}

TEST(ServeClient, ReportsAStreamWithoutTokens) {
  const StreamResult r = run({kUsage3, "[DONE]"});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("carried 0 tokens but usage says 3"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace tessera::bench
