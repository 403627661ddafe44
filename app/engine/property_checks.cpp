#include "app/engine/property_checks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/casefile/case_layout.h"
#include "kernels/native/native_plan.h"

namespace attnres {
namespace {

constexpr int kRepeatedCalls = 3;
// Graph replays on inputs other than the case's, each written into the captured buffers.
constexpr int kFreshReplays = 2;
// The rows that are moved within a batch, or surrounded by garbage: the case's first ones.
constexpr std::int64_t kMovedRows = 64;
constexpr std::int64_t kShifts[] = {1, 3};
// vLLM's rms_norm changed its block size at 256 tokens: a bound of a kind kernels often have.
constexpr std::int64_t kCommonBound = 256;

struct RowsDifference {
  std::int64_t count = 0;
  std::int64_t row = -1, column = -1;  // the first that differs, as a row of `judged`
  bf16_bits judged = 0, now = 0;
};

// Rows [judged_first, judged_first + rows) of `judged` against rows [now_first, now_first + rows)
// of `now`, bit for bit.
RowsDifference rows_difference(const HostTensor& judged, std::int64_t judged_first, const HostTensor& now,
                               std::int64_t now_first, std::int64_t rows) {
  RowsDifference d;
  const std::int64_t columns = judged.columns;
  for (std::int64_t r = judged_first; r < judged_first + rows; ++r) {
    const bf16_bits* a = judged.row(r);
    const bf16_bits* b = now.row(now_first - judged_first + r);
    if (std::memcmp(a, b, std::size_t(columns) * sizeof(bf16_bits)) == 0) continue;
    for (std::int64_t c = 0; c < columns; ++c) {
      if (a[c] == b[c]) continue;
      if (d.count++ == 0) {
        d.row = r;
        d.column = c;
        d.judged = a[c];
        d.now = b[c];
      }
    }
  }
  return d;
}

CaseSpec with_tokens(const CaseSpec& spec, std::int64_t tokens) {
  CaseSpec variant = spec;
  variant.shape.tokens = tokens;
  variant.strides = resized_strides(spec.strides, spec.shape, variant.shape);
  return variant;
}

// Row p of every per-token input takes what row (p - shift) mod T held.
void rotate_tokens(CaseTensors& tensors, std::int64_t shift) {
  const std::int64_t tokens = tensors.shape.tokens;
  auto rotate = [&](HostTensor& tensor, std::int64_t rows_per_token) {
    const HostTensor before = tensor;
    for (std::int64_t p = 0; p < tokens; ++p)
      for (std::int64_t b = 0; b < rows_per_token; ++b)
        std::copy_n(before.row(((p - shift + tokens) % tokens) * rows_per_token + b), tensor.columns,
                    tensor.row(p * rows_per_token + b));
  };
  rotate(tensors.prefix, 1);
  if (tensors.shape.has_delta) rotate(tensors.delta, 1);
  rotate(tensors.blocks, tensors.shape.max_blocks);
}

void fill_garbage(bf16_bits* begin, bf16_bits* end) {
  for (bf16_bits* e = begin; e < end; ++e) *e = kGarbageBits[(e - begin) % std::size(kGarbageBits)];
}

// Garbage in the per-token inputs of the tokens marked, in the blocks past num_blocks of every
// token, and in every input's padding (storage that is no logical element).
void fill_garbage(CaseTensors& tensors, const std::vector<bool>& garbage_token) {
  const AttnResShape& shape = tensors.shape;
  auto rows = [&](HostTensor& tensor, std::int64_t rows_per_token) {
    for (std::int64_t r = 0; r < tensor.rows(); ++r) {
      const std::int64_t token = r / rows_per_token, block = r % rows_per_token;
      if (garbage_token[std::size_t(token)] || (rows_per_token > 1 && block >= shape.num_blocks))
        fill_garbage(tensor.row(r), tensor.row(r) + tensor.columns);
    }
  };
  rows(tensors.prefix, 1);
  if (shape.has_delta) rows(tensors.delta, 1);
  if (shape.max_blocks > 0) rows(tensors.blocks, shape.max_blocks);
  std::vector<HostTensor*> all = tensors.all();
  all.pop_back();  // the output: the workspace poisons it
  for (HostTensor* tensor : all) {
    if (tensor->empty()) continue;
    for_each_storage_run(*tensor, 0, tensor->nesting().major,
                         [&](std::int64_t begin, std::int64_t end, std::int64_t, bool logical) {
                           if (!logical) fill_garbage(tensor->base() + begin, tensor->base() + end);
                         });
  }
}

std::string bits_text(bf16_bits bits) { return fmt::format("0x{:04x}", bits); }

// Determinism: the judged call made again, kRepeatedCalls times, on inputs made the same way.
PropertyResult judge_determinism(const CaseSpec& spec, const HostTensor& judged, const VariantCaller& call,
                                 const InputSource* replayed) {
  PropertyResult result;
  result.property = CaseProperty::determinism;
  for (int k = 1; k <= kRepeatedCalls; ++k) {
    const VariantCall again = call(spec, replayed, VariantLaunch::as_judged);
    if (again.outcome == VariantCall::Outcome::not_run) {
      result.disposition = Disposition::not_run;
      result.detail = "not run: " + again.reason;
      return result;
    }
    if (again.outcome == VariantCall::Outcome::refused || again.outcome == VariantCall::Outcome::unavailable) {
      result.disposition = Disposition::failed;
      result.detail =
          fmt::format("call {} of {} more refused what the judged call computed: {}", k, kRepeatedCalls, again.reason);
      return result;
    }
    const RowsDifference d = rows_difference(judged, 0, again.output, 0, spec.shape.tokens);
    if (d.count) {
      result.disposition = Disposition::failed;
      result.detail = fmt::format(
          "call {} of {} more on the same inputs differs from the judged call in {} of {} elements; first at "
          "[{}, {}]: {} in the judged call, {} in call {}",
          k, kRepeatedCalls, d.count, spec.shape.tokens * spec.shape.hidden, d.row, d.column, bits_text(d.judged),
          bits_text(d.now), k);
      return result;
    }
  }
  result.disposition = Disposition::passed;
  result.detail = fmt::format("{} more calls on the same inputs gave the judged call's bits", kRepeatedCalls);
  return result;
}

// Batch invariance: the case's rows computed in batches of other sizes (the first min(T, T')
// rows are the same inputs: the generator is indexed by row), and moved later in a batch.
PropertyResult judge_batch_invariance(const CaseSpec& spec, const HostTensor& judged, const VariantCaller& call) {
  PropertyResult result;
  result.property = CaseProperty::batch_invariance;
  const std::int64_t tokens = spec.shape.tokens;
  std::set<std::int64_t> sizes{1, 2, kCommonBound, kCommonBound + 1, tokens - 1, tokens + 1};
  for (const std::int64_t bound : plan_boundaries(spec.shape)) sizes.insert({bound, bound + 1});
  std::vector<std::string> judged_at, not_judged;
  auto differs = [&](const RowsDifference& d, std::int64_t rows, const std::string& where) {
    result.disposition = Disposition::failed;
    result.detail = fmt::format(
        "row {} of the case's batch of {} differs {}: {} element{} of the {} row{} compared differ{}; first at "
        "column {}: {} in the batch of {}, {} there",
        d.row, tokens, where, d.count, d.count == 1 ? "" : "s", rows, rows == 1 ? "" : "s", d.count == 1 ? "s" : "",
        d.column, bits_text(d.judged), tokens, bits_text(d.now));
  };
  for (const std::int64_t size : sizes) {
    if (size < 1 || size == tokens || size > kMaxTokens) continue;
    const CaseSpec variant = with_tokens(spec, size);
    if (const auto violation = layout_violation(variant.shape, variant.strides, INT64_MAX)) {
      not_judged.push_back(fmt::format("T = {} ({})", size, violation->message));
      continue;
    }
    const VariantCall other = call(variant, nullptr, VariantLaunch::as_judged);
    if (other.outcome != VariantCall::Outcome::computed) {
      not_judged.push_back(fmt::format("T = {} ({})", size, other.reason));
      continue;
    }
    const std::int64_t rows = std::min(tokens, size);
    if (const RowsDifference d = rows_difference(judged, 0, other.output, 0, rows); d.count) {
      differs(d, rows, fmt::format("when computed in a batch of {}", size));
      return result;
    }
    judged_at.push_back(std::to_string(size));
  }
  const std::int64_t moved = std::min(tokens, kMovedRows);
  std::vector<std::string> shifted;
  for (const std::int64_t shift : kShifts) {
    const CaseSpec variant = with_tokens(spec, moved + shift);
    if (layout_violation(variant.shape, variant.strides, INT64_MAX)) continue;
    const InputSource moved_rows{[&] {
                                   CaseTensors tensors = make_case_tensors(variant);
                                   rotate_tokens(tensors, shift);
                                   return tensors;
                                 },
                                 0};
    const VariantCall other = call(variant, &moved_rows, VariantLaunch::as_judged);
    if (other.outcome != VariantCall::Outcome::computed) {
      not_judged.push_back(fmt::format("rows moved {} later ({})", shift, other.reason));
      continue;
    }
    if (const RowsDifference d = rows_difference(judged, 0, other.output, shift, moved); d.count) {
      differs(d, moved, fmt::format("when it is row {} of a batch of {}", d.row + shift, moved + shift));
      return result;
    }
    shifted.push_back(std::to_string(shift));
  }
  if (judged_at.empty() && shifted.empty()) {
    result.disposition = Disposition::skipped;
    result.detail = fmt::format("the kernel computes no other batch: {}", fmt::join(not_judged, "; "));
    return result;
  }
  result.disposition = Disposition::passed;
  result.detail = fmt::format("every row bit-identical in batches of {} tokens", fmt::join(judged_at, ", "));
  if (!shifted.empty())
    result.detail +=
        fmt::format(", and the first {} rows moved {} rows later in a batch", moved, fmt::join(shifted, " and "));
  if (!not_judged.empty()) result.detail += fmt::format("; not judged: {}", fmt::join(not_judged, "; "));
  return result;
}

// Garbage: the first rows of the case between a garbage row before them and two after, with
// garbage in every padding element and in the blocks past num_blocks, against the same batch
// with generated values there.
PropertyResult judge_garbage(const CaseSpec& spec, const VariantCaller& call) {
  PropertyResult result;
  result.property = CaseProperty::garbage;
  const std::int64_t judged_rows = std::min(spec.shape.tokens, kMovedRows);
  const std::int64_t tokens = judged_rows + 3;
  const CaseSpec variant = with_tokens(spec, tokens);
  if (const auto violation = layout_violation(variant.shape, variant.strides, INT64_MAX)) {
    result.disposition = Disposition::skipped;
    result.detail = "a batch of " + std::to_string(tokens) + " rows cannot be laid out so: " + violation->message;
    return result;
  }
  std::vector<bool> garbage_token(std::size_t(tokens), false);
  garbage_token.front() = garbage_token[std::size_t(tokens - 2)] = garbage_token.back() = true;
  const InputSource clean_fill{[&] {
                                 CaseTensors tensors = make_case_tensors(variant);
                                 rotate_tokens(tensors, 1);
                                 return tensors;
                               },
                               0};
  const InputSource garbage_fill{[&] {
                                   CaseTensors tensors = clean_fill.make();
                                   fill_garbage(tensors, garbage_token);
                                   return tensors;
                                 },
                                 0};
  const VariantCall clean = call(variant, &clean_fill, VariantLaunch::as_judged);
  if (clean.outcome != VariantCall::Outcome::computed) {
    result.disposition = clean.outcome == VariantCall::Outcome::not_run ? Disposition::not_run : Disposition::skipped;
    result.detail = fmt::format("the batch of {} rows it needs was not computed: {}", tokens, clean.reason);
    return result;
  }
  const VariantCall dirty = call(variant, &garbage_fill, VariantLaunch::as_judged);
  const std::string garbage_text = fmt::format(
      "with NaN, ±Inf and ±3.0e38 in rows 0, {} and {} of a batch of {}, in every padding element and in the "
      "blocks past num_blocks",
      tokens - 2, tokens - 1, tokens);
  if (dirty.outcome == VariantCall::Outcome::not_run) {
    result.disposition = Disposition::not_run;
    result.detail = "not run: " + dirty.reason;
    return result;
  }
  if (dirty.outcome != VariantCall::Outcome::computed) {
    result.disposition = Disposition::failed;
    result.detail = fmt::format("{}, the kernel refused the batch it computes with finite values there: {}",
                                garbage_text, dirty.reason);
    return result;
  }
  const RowsDifference d = rows_difference(clean.output, 1, dirty.output, 1, judged_rows);
  if (d.count) {
    result.disposition = Disposition::failed;
    result.detail = fmt::format(
        "{}, rows 1..{} (the case's first {}) change: {} of their elements differ from the same batch with "
        "generated values there; first at [{}, {}]: {} with generated values, {} with garbage",
        garbage_text, judged_rows, judged_rows, d.count, d.row, d.column, bits_text(d.judged), bits_text(d.now));
    return result;
  }
  result.disposition = Disposition::passed;
  result.detail = fmt::format("{}, the {} rows between them are bit-identical to the same batch with generated values",
                              garbage_text, judged_rows);
  return result;
}

// The verdict on a call that computed nothing (`how`: how it was called): not run, skipped where
// the backend cannot make it so, failed where the kernel refused what it computed as judged.
// False where it computed.
bool judged_uncomputed(VariantCall::Outcome outcome, const std::string& reason, const std::string& how,
                       PropertyResult& result) {
  switch (outcome) {
    case VariantCall::Outcome::not_run:
      result.disposition = Disposition::not_run;
      result.detail = "not run: " + reason;
      return true;
    case VariantCall::Outcome::unavailable:
      result.disposition = Disposition::skipped;
      result.detail = reason;
      return true;
    case VariantCall::Outcome::refused:
      result.disposition = Disposition::failed;
      result.detail = fmt::format("{}, the kernel refused what it computed as judged: {}", how, reason);
      return true;
    case VariantCall::Outcome::computed: break;
  }
  return false;
}

// Stream and PDL: the case called where its inputs are written late (VariantLaunch), against
// the judged call. `how` says where; `reads_early` who reads them before they are written.
PropertyResult judge_late_inputs(CaseProperty property, VariantLaunch launch, const std::string& how,
                                 const std::string& reads_early, const CaseSpec& spec, const HostTensor& judged,
                                 const VariantCaller& call, const InputSource* replayed) {
  PropertyResult result;
  result.property = property;
  const VariantCall late = call(spec, replayed, launch);
  if (judged_uncomputed(late.outcome, late.reason, how, result)) return result;
  const RowsDifference d = rows_difference(judged, 0, late.output, 0, spec.shape.tokens);
  if (d.count) {
    result.disposition = Disposition::failed;
    result.detail = fmt::format(
        "{}, {} of {} elements differ from the judged call's; first at [{}, {}]: {} in the judged call, {} there; "
        "{} reads the inputs before they are written",
        how, d.count, spec.shape.tokens * spec.shape.hidden, d.row, d.column, bits_text(d.judged), bits_text(d.now),
        reads_early);
    return result;
  }
  result.disposition = Disposition::passed;
  result.detail = how + ", it gave the judged call's bits";
  return result;
}

PropertyResult judge_stream(const CaseSpec& spec, const HostTensor& judged, const VariantCaller& call,
                            const InputSource* replayed) {
  return judge_late_inputs(
      CaseProperty::stream, VariantLaunch::behind_late_inputs,
      fmt::format("called on a non-blocking stream whose earlier work writes the inputs {} ms late",
                  CaseWorkspace::kLateInputsMicroseconds / 1000),
      "a kernel launched on another stream (the legacy default stream, or one of its own that does not wait for "
      "the one it is given)",
      spec, judged, call, replayed);
}

PropertyResult judge_pdl(const CaseSpec& spec, const HostTensor& judged, const VariantCaller& call,
                         const InputSource* replayed) {
  return judge_late_inputs(
      CaseProperty::pdl, VariantLaunch::behind_early_trigger,
      fmt::format("launched with programmatic dependent launch behind a producer that lets it start at once and "
                  "writes the inputs {} ms later",
                  CaseWorkspace::kLateInputsMicroseconds / 1000),
      "a kernel that does not wait for the previous grid (griddepcontrol.wait, cudaGridDependencySynchronize) "
      "before its first load, or one launched on another stream,",
      spec, judged, call, replayed);
}

// Graph: the call captured once, replayed on the case's inputs and on fresh ones written into
// the captured buffers; each replay against an eager call on its inputs and the float64 reference.
PropertyResult judge_graph(const CaseSpec& spec, const HostTensor& judged, const PropertyCallers& callers) {
  PropertyResult result;
  result.property = CaseProperty::graph;
  std::vector<std::uint64_t> seeds{spec.seed};
  for (int k = 1; k <= kFreshReplays; ++k) seeds.push_back(spec.seed + std::uint64_t(k));
  const GraphCall graph = callers.replay_graph(spec, seeds);
  if (graph.capture_failed) {
    result.disposition = Disposition::failed;
    result.detail = "the call cannot be captured in a CUDA graph: " + graph.reason;
    return result;
  }
  if (judged_uncomputed(graph.outcome, graph.reason, "captured in a CUDA graph", result)) return result;
  for (std::size_t k = 0; k < graph.replays.size(); ++k) {
    const GraphReplay& replay = graph.replays[k];
    const std::string which = k == 0 ? "replay 1, on the case's inputs,"
                                     : fmt::format("replay {}, on fresh inputs (seed {}),", k + 1, seeds[k]);
    if (!replay.violations.empty()) {
      std::string violations;
      for (const Violation& v : replay.violations) violations += "; " + v.to_string();
      result.disposition = Disposition::failed;
      result.detail = fmt::format("{} wrote where it must not: {}", which, violations.substr(2));
      return result;
    }
    if (!replay.comparison.within_tolerance() || !replay.comparison.exact_state() || replay.comparison.systematic()) {
      result.disposition = Disposition::failed;
      result.detail =
          fmt::format("{} does not meet the float64 reference: {}", which, describe_comparison(replay.comparison));
      return result;
    }
    VariantCall eager;
    if (k == 0) {
      eager.output = judged;
    } else {
      CaseSpec fresh = spec;
      fresh.seed = seeds[k];
      eager = callers.call(fresh, nullptr, VariantLaunch::as_judged);
      if (eager.outcome != VariantCall::Outcome::computed) {
        result.disposition =
            eager.outcome == VariantCall::Outcome::not_run ? Disposition::not_run : Disposition::failed;
        result.detail =
            fmt::format("the eager call on the inputs of replay {} was not computed: {}", k + 1, eager.reason);
        return result;
      }
    }
    if (const RowsDifference d = rows_difference(eager.output, 0, replay.output, 0, spec.shape.tokens); d.count) {
      result.disposition = Disposition::failed;
      result.detail = fmt::format(
          "{} differs from an eager call on the same inputs in {} of {} elements; first at [{}, {}]: {} eagerly, {} "
          "replayed; a value read on the host at capture time, or work not recorded into the graph, is replayed "
          "stale",
          which, d.count, spec.shape.tokens * spec.shape.hidden, d.row, d.column, bits_text(d.judged),
          bits_text(d.now));
      return result;
    }
  }
  result.disposition = Disposition::passed;
  result.detail = fmt::format(
      "captured once in a CUDA graph on a non-blocking stream and replayed {} times, on the case's inputs and on {} "
      "fresh sets written into the captured buffers: each replay bit-identical to an eager call on its inputs, "
      "within tolerance of the float64 reference, prefix and blocks exact, nothing else written",
      graph.replays.size(), graph.replays.size() - 1);
  return result;
}

}  // namespace

std::vector<std::int64_t> plan_boundaries(const AttnResShape& shape) {
  return native::plan_token_bounds(shape.num_blocks, shape.hidden);
}

std::vector<PropertyResult> judge_properties(const CaseSpec& spec, const std::vector<CaseProperty>& properties,
                                             const HostTensor& judged_output, const PropertyCallers& callers,
                                             const InputSource* replayed) {
  std::vector<PropertyResult> results;
  for (const CaseProperty property : properties) {
    const auto start = std::chrono::steady_clock::now();
    PropertyResult result;
    result.property = property;
    try {
      if (spec.shape.tokens == 0) {
        result.disposition = Disposition::skipped;
        result.detail = "T = 0: no row to compute";
      } else if (property == CaseProperty::determinism) {
        result = judge_determinism(spec, judged_output, callers.call, replayed);
      } else if (property == CaseProperty::stream) {
        result = judge_stream(spec, judged_output, callers.call, replayed);
      } else if (property == CaseProperty::pdl) {
        result = judge_pdl(spec, judged_output, callers.call, replayed);
      } else if (replayed) {
        result.disposition = Disposition::skipped;
        result.detail = "the inputs are replayed from a file: other inputs are made from the case's seed only";
      } else if (property == CaseProperty::batch_invariance) {
        result = judge_batch_invariance(spec, judged_output, callers.call);
      } else if (property == CaseProperty::graph) {
        result = judge_graph(spec, judged_output, callers);
      } else {
        result = judge_garbage(spec, callers.call);
      }
    } catch (const std::bad_alloc&) {
      result.disposition = Disposition::error;
      result.detail = "out of host memory";
    } catch (const std::exception& e) {
      result.disposition = Disposition::error;
      result.detail = std::string("the kernel failed on a call this check made: ") + e.what();
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    results.push_back(std::move(result));
  }
  return results;
}

std::vector<PropertyResult> unjudged_properties(const std::vector<CaseProperty>& properties, const std::string& why) {
  std::vector<PropertyResult> results;
  for (const CaseProperty property : properties) results.push_back({property, Disposition::skipped, why, 0});
  return results;
}

}  // namespace attnres
