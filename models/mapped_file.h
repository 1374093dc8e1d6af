// A whole file mapped read-only, shared by the model file readers (GGUF, safetensors): weights
// are used in place from the mapping, which lives as long as any tensor or reader holds it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"

namespace tessera {

struct MappedFile {
  std::shared_ptr<const void> data;  // unmapped when the last holder lets go
  size_t size = 0;
};

// Errors name the path: NotFound for a missing file, InvalidArgument for a directory or other
// non-regular file, DataLoss for an empty one, Unavailable when open or mmap fails.
Result<MappedFile> map_file_readonly(const std::string& path);

// Drops the resident pages wholly inside [p, p + n), which must lie in a mapping made by
// map_file_readonly: they are read from the file again if touched. A hint (errors ignored):
// callers use it when a weight was copied elsewhere and its file bytes are no longer read.
void release_file_pages(const void* p, size_t n);

// The whole file as bytes, for small files read once (JSON, text). Errors name the path: NotFound
// for a missing file, InvalidArgument for a directory or other non-regular file, Unavailable when
// it cannot be opened (permissions) or read. An empty file is an empty string: callers decide.
Result<std::string> read_file(const std::string& path);

}  // namespace tessera
