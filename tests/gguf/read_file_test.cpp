// read_file (models/mapped_file.h): the one whole-file reader of the model loaders and the CLI
// returns every byte, and its errors name the path and say what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "models/mapped_file.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class ReadFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_read_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  fs::path dir_;
};

TEST_F(ReadFile, ReturnsEveryByte) {
  // Longer than one read chunk and with NUL bytes, so a short or text-mode read shows.
  std::mt19937 rng(7);
  std::string bytes(10000, '\0');
  for (char& c : bytes) c = char(rng() & 0xff);
  auto r = read_file(write("random.bin", bytes));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, bytes);
  auto empty = read_file(write("empty.txt", ""));
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->empty());
}

TEST_F(ReadFile, MissingFileAndDirectoryNameThePath) {
  const std::string missing = (dir_ / "no-such.json").string();
  auto m = read_file(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find(missing + ": cannot open"), std::string::npos) << m.status().to_string();
  auto d = read_file(dir_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find(dir_.string() + ": not a regular file"), std::string::npos)
      << d.status().to_string();
}

}  // namespace
}  // namespace tessera
