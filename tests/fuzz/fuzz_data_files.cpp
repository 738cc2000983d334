// libFuzzer targets: dataset files' metadata (issue 39 item 7), read through acc::data::Reader (src/data/files: the
// arrow-rs readers of the Rust library behind data_ffi.h).
//   fuzz_parquet_footer (-DFUZZ_PARQUET)  the input is a Parquet file: its footer (thrift FileMetaData, its length),
//                                         row groups, page headers and pages
//   fuzz_arrow_ipc                        the input's first byte picks the format (even: IPC stream, as a save_to_disk
//                                         shard; odd: IPC file); the rest is the file: messages (flatbuffers), their
//                                         lengths, the footer, bodies
// The file is opened, every batch read in order and by index, every cell written as JSON. Refusals are
// std::runtime_error (naming the file); anything else escaping is a finding, and so is a crash, a hang, a leak or an
// allocation past libFuzzer's limit. As for the text targets, the Rust archive is not instrumented for coverage.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "data/files/table.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#ifdef FUZZ_PARQUET
  const auto format = acc::data::Format::Parquet;
#else
  if (size == 0) return 0;
  const auto format = data[0] % 2 == 0 ? acc::data::Format::ArrowStream : acc::data::Format::ArrowFile;
  ++data;
  --size;
#endif
  // A memory file, named through /proc: a regular file to the reader, no disk.
  static const int fd = memfd_create("acc-fuzz-data", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) return 0;
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  acc_fuzz::guarded<std::runtime_error>([&] {
    acc::data::OpenOptions o;
    o.format = format;
    acc::data::Reader r = acc::data::Reader::open(path, o);
    size_t bytes = 0;
    auto cells = [&](const acc::data::RecordBatch& b) {
      for (const auto& c : b.columns())
        for (size_t i = 0; i < b.rows && i < 4096; ++i) {
          bytes += c.json(i).size();
          if (!c.is_null(i) && (c.type() == "string" || c.type() == "large_string")) bytes += c.str(i).size();
        }
    };
    // A table may be long for nothing (a batch of no columns claims up to 2^31 rows): the metadata is what is fuzzed,
    // so a few thousand batches are read.
    for (int k = 0; k < 4096; ++k) {
      auto b = r.next_batch(64);
      if (!b) break;
      cells(*b);
    }
    if (r.map_style()) {
      const size_t n = r.num_batches();
      for (size_t i = 0; i < n && i < 64; ++i) cells(r.batch(i));
      if (*r.num_rows() > 0) cells(r.take({0, static_cast<int64_t>(*r.num_rows() - 1), 0}));
      if (*r.num_rows() > 2) cells(r.rows(*r.num_rows() / 2, 64));
    }
    (void)bytes;
  });
  return 0;
}
