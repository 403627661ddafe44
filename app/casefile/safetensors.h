// safetensors files (the format torch's safetensors package reads): a little-endian u64
// header length, a JSON header, then the raw bytes. Strided tensors are stored as their flat
// storage (padding included) with the logical shape, strides and storage offset in
// __metadata__. Files come from other people: every size, shape, stride and offset is checked
// before any byte is copied.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/casefile/host_tensors.h"

namespace attnres {

// "file: field: message"; `field` is a JSON pointer into the header ("/prefix/shape",
// "/__metadata__/prefix.stride") or a tensor name, empty for the file as a whole.
class SafetensorsError : public std::runtime_error {
 public:
  SafetensorsError(std::string file, std::string field, std::string message);
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_, field_, message_;
};

struct SafetensorEntry {
  std::string name;
  std::string dtype;  // "BF16", "F64", ...
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;
};

struct SafetensorsFile {
  std::vector<SafetensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  const SafetensorEntry* find(const std::string& name) const;
};

void write_safetensors(const std::string& path, const SafetensorsFile& file);
// Throws SafetensorsError naming the file and what is malformed; never reads out of bounds.
SafetensorsFile read_safetensors(const std::string& path);
// The same over `size` bytes of a stream; `label` names the source in errors.
SafetensorsFile parse_safetensors(std::istream& in, std::uint64_t size, const std::string& label);

// A host tensor as its flat BF16 storage plus "<name>.shape", "<name>.stride" and
// "<name>.storage_offset" metadata: [T, H] (dims 2), [T, MAXB, H] (3) or [H] (1).
void add_strided(SafetensorsFile& file, const HostTensor& tensor, int dims, const std::string& name);

// The inputs of a case as written to a repro bundle's inputs.safetensors.
SafetensorsFile inputs_file(const CaseSpec& spec, const CaseTensors& inputs);

// Tensors captured elsewhere (or by a bundle) as a case's inputs. Shapes and strides come from
// the file's metadata where present, else dense [T,H] / [T,MAXB,H] / [H]. The constructor
// proves every tensor's extent lies inside its stored data and checks the stored checksums
// ("checksum.<name>" in the metadata), then updates spec's sizes, strides, has_delta and
// has_output_norm to match; nothing is copied until tensors() is called.
class ReplayInputs {
 public:
  ReplayInputs(SafetensorsFile file, std::string label, CaseSpec& spec, bool verify_checksums);
  CaseTensors tensors() const;
  // Host memory the parsed file holds while the case runs.
  std::int64_t held_bytes() const;

  // One tensor's validated layout in the storage of entry `entry`.
  struct Source {
    std::size_t entry = 0;  // index into the file's tensors
    bool present = false;
    StridedLayout layout;
  };

 private:
  SafetensorsFile file_;
  AttnResShape shape_;
  AttnResStrides strides_;  // the updated case's own layout
  Source prefix_, delta_, blocks_, norm_weight_, qk_weight_, output_norm_weight_;
};

}  // namespace attnres
