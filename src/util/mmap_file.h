// Read-only memory map of a whole file. Throws Error naming the path when it cannot be opened.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mpkv {

class MmapFile {
 public:
  explicit MmapFile(const std::string& path);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mpkv
