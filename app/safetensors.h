// safetensors files (the format torch's safetensors package reads): a little-endian u64
// header length, a JSON header, then the raw bytes. Strided tensors are stored as their flat
// storage (padding included) with the logical shape and strides in __metadata__.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/case_spec.h"
#include "app/host_tensors.h"

namespace attnres {

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

// A host tensor as flat BF16 storage plus "<name>.shape" / "<name>.stride" metadata.
void add_strided(SafetensorsFile& file, const HostTensor& tensor, const std::vector<std::int64_t>& shape,
                 const std::vector<std::int64_t>& stride, const std::string& name);

// The inputs of a case as written to a repro bundle's inputs.safetensors.
SafetensorsFile inputs_file(const CaseSpec& spec, const CaseTensors& inputs);

// Tensors captured elsewhere (or by a bundle) as a case's inputs. Shapes and strides come from
// the file's metadata where present, else dense [T,H] / [T,MAXB,H] / [H]; spec's sizes,
// strides, has_delta and has_output_norm are updated to match.
CaseTensors read_inputs_safetensors(const std::string& path, CaseSpec& spec);

}  // namespace attnres
