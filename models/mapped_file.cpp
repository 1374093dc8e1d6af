#include "models/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace tessera {

namespace {
// Opens |path| read-only; the file must be a regular one. Fills |st|; the caller closes the fd.
Result<int> open_regular(const std::string& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT ? NotFound(msg) : Unavailable(msg);
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  return fd;
}
}  // namespace

Result<MappedFile> map_file_readonly(const std::string& path) {
  struct stat st {};
  TS_ASSIGN_OR_RETURN(const int fd, open_regular(path, &st));
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return DataLoss(path + ": truncated: the file is empty");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return Unavailable(path + ": mmap failed: " + std::strerror(err));
  MappedFile f;
  f.data = std::shared_ptr<const void>(addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  f.size = size;
  return f;
}

Result<std::string> read_file(const std::string& path) {
  struct stat st {};
  TS_ASSIGN_OR_RETURN(const int fd, open_regular(path, &st));
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  // NOTE: read until EOF rather than trusting st_size, so a file that grows or shrinks while read
  // still comes back whole and consistent.
  for (;;) {
    if (got == out.size()) out.resize(out.size() + 4096);
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Unavailable(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace tessera

namespace tessera {

void release_file_pages(const void* p, size_t n) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + n) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace tessera
