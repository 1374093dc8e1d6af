// A MessagePack writer for the few types the KV events need (arrays, unsigned integers, nil,
// strings, float64), appending to a byte string. The format: github.com/msgpack/msgpack/blob/master/spec.md.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tessera::server::msgpack {

namespace detail {
inline void put_be(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(char(uint8_t(v >> (8 * i))));
}
}  // namespace detail

inline void array(std::string& out, size_t n) {
  if (n < 16) {
    out.push_back(char(0x90 | n));
  } else if (n <= 0xFFFF) {
    out.push_back(char(0xdc));
    detail::put_be(out, n, 2);
  } else {
    out.push_back(char(0xdd));
    detail::put_be(out, n, 4);
  }
}

// The shortest encoding of |v| (msgpack decoders give back the same integer whatever the width).
inline void u64(std::string& out, uint64_t v) {
  if (v < 128) {
    out.push_back(char(v));
  } else if (v <= 0xFF) {
    out.push_back(char(0xcc));
    detail::put_be(out, v, 1);
  } else if (v <= 0xFFFF) {
    out.push_back(char(0xcd));
    detail::put_be(out, v, 2);
  } else if (v <= 0xFFFFFFFFull) {
    out.push_back(char(0xce));
    detail::put_be(out, v, 4);
  } else {
    out.push_back(char(0xcf));
    detail::put_be(out, v, 8);
  }
}

inline void nil(std::string& out) { out.push_back(char(0xc0)); }

inline void str(std::string& out, std::string_view s) {
  if (s.size() < 32) {
    out.push_back(char(0xa0 | s.size()));
  } else if (s.size() <= 0xFF) {
    out.push_back(char(0xd9));
    detail::put_be(out, s.size(), 1);
  } else if (s.size() <= 0xFFFF) {
    out.push_back(char(0xda));
    detail::put_be(out, s.size(), 2);
  } else {
    out.push_back(char(0xdb));
    detail::put_be(out, s.size(), 4);
  }
  out.append(s);
}

inline void float64(std::string& out, double v) {
  out.push_back(char(0xcb));
  detail::put_be(out, std::bit_cast<uint64_t>(v), 8);
}

}  // namespace tessera::server::msgpack
