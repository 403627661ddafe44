#include "app/cli/commands/explore.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/cli/commands/shrink.h"
#include "app/engine/runner.h"
#include "app/workers/make_case_runner.h"
#include "kernels/common/problem.h"
#include "kernels/native/native_limits.h"

namespace attnres {

namespace {

std::int64_t uniform(std::mt19937_64& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// 0 most often, then an odd padding (misaligns every row after the first), then a multiple of 8.
std::int64_t draw_padding(std::mt19937_64& rng) {
  const double pick = std::uniform_real_distribution<double>(0, 1)(rng);
  if (pick < 0.5) return 0;
  if (pick < 0.75) return uniform(rng, 1, 15);
  constexpr std::array<std::int64_t, 3> aligned{8, 16, 64};
  return aligned[std::size_t(uniform(rng, 0, 2))];
}

// "  refused 12 times: "message"", most frequent first, at most 8 lines and one for the rest.
std::string counted_lines(const char* what, const std::map<std::string, int>& counts) {
  std::vector<std::pair<int, std::string>> ordered;
  for (const auto& [text, n] : counts) ordered.emplace_back(n, text);
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  constexpr std::size_t kShown = 8;
  std::string lines;
  for (std::size_t i = 0; i < ordered.size() && i < kShown; ++i)
    lines += fmt::format("  {} {} time{}: {}\n", what, ordered[i].first, ordered[i].first == 1 ? "" : "s",
                         quoted_literal(ordered[i].second));
  if (ordered.size() > kShown) lines += fmt::format("  {} with {} other messages\n", what, ordered.size() - kShown);
  return lines;
}

}  // namespace

CaseSpec draw_case(std::mt19937_64& rng, int index, const ExploreLimits& limits) {
  // T: empty and single-token batches often, else log-uniform up to the limit.
  std::int64_t tokens = 0;
  const double t_pick = std::uniform_real_distribution<double>(0, 1)(rng);
  if (t_pick < 0.1)
    tokens = 0;
  else if (t_pick < 0.3)
    tokens = 1;
  else
    tokens =
        std::min<std::int64_t>(limits.max_tokens, std::int64_t(std::exp(std::uniform_real_distribution<double>(
                                                      std::log(2.0), std::log(double(limits.max_tokens) + 1))(rng))));
  // H: half of the time one the native kernel takes (a multiple of its granule), else any multiple of 8.
  const int native_choices = std::max(1, std::min(limits.max_hidden, native::kMaxHidden) / native::kHiddenMultiple);
  const int hidden = chance(rng, 0.5) ? native::kHiddenMultiple * int(uniform(rng, 1, native_choices))
                                      : 8 * int(uniform(rng, 1, limits.max_hidden / 8));
  const int max_blocks = int(uniform(rng, 0, native::kMaxBlocks + 2));
  const int num_blocks = int(uniform(rng, 0, max_blocks));
  CaseSpec spec = default_case(fmt::format("explore-{}", index), tokens, hidden, max_blocks, num_blocks);
  spec.shape.block_write_idx = max_blocks > 0 && chance(rng, 0.5) ? int(uniform(rng, 0, max_blocks - 1)) : -1;
  spec.shape.has_delta = chance(rng, 0.7);
  spec.shape.has_output_norm = chance(rng, 0.7);
  // The two eps apart as often as equal, one of them sometimes as large as small sources' mean
  // square: a kernel that drops or swaps one computes another answer only then.
  constexpr std::array<double, 3> eps_values{1e-5, 1e-6, 1e-3};
  spec.eps = eps_values[std::size_t(uniform(rng, 0, 2))];
  spec.output_norm_eps = chance(rng, 0.5) ? spec.eps : eps_values[std::size_t(uniform(rng, 0, 2))];
  spec.shape.eps = float(spec.eps);
  spec.shape.output_norm_eps = float(spec.output_norm_eps);
  spec.seed = rng();
  spec.strides.prefix = hidden + draw_padding(rng);
  spec.strides.delta = hidden + draw_padding(rng);
  spec.strides.output = hidden + draw_padding(rng);
  // Blocks token-major [T, MAXB, H], or a view of block-major [MAXB, T, H] storage.
  const std::int64_t blocks_row_stride = hidden + draw_padding(rng);
  if (chance(rng, 0.25)) {
    spec.strides.blocks_token = blocks_row_stride;
    spec.strides.blocks_row = std::max<std::int64_t>(tokens, 1) * blocks_row_stride;
  } else {
    set_token_major_blocks(spec.strides, max_blocks, blocks_row_stride);
  }
  // Views whose first element is not their storage's (x[:, 1:], x[1:]): odd offsets misalign it.
  for (std::int64_t& offset : spec.strides.storage_offset) offset = chance(rng, 0.3) ? draw_padding(rng) : 0;
  // Sources that differ in RMS, sometimes a zero slot; activations of differing scale.
  constexpr std::array<double, 4> scales{0.5, 1.0, 4.0, 16.0};
  spec.distributions[int(InputTensor::prefix)].std = scales[std::size_t(uniform(rng, 0, 3))];
  if (max_blocks > 0 && chance(rng, 0.7)) {
    std::vector<double>& block_scales = spec.distributions[int(InputTensor::blocks)].block_scales;
    for (int b = 0; b < max_blocks; ++b)
      block_scales.push_back(chance(rng, 0.1) ? 0.0 : scales[std::size_t(uniform(rng, 0, 3))]);
  }
  // Sources of RMS 0.01 (eps then matters), or a residual of bf16 denormals (p must be written
  // back bit for bit, which a kernel flushing denormals to zero does not do).
  const double pick = std::uniform_real_distribution<double>(0, 1)(rng);
  if (pick < 0.15) {
    spec.distributions[int(InputTensor::prefix)].std = 0.01;
    spec.distributions[int(InputTensor::delta)].std = 0.001;
    spec.distributions[int(InputTensor::blocks)].std = 0.01;
  } else if (pick < 0.2) {
    spec.distributions[int(InputTensor::prefix)].std = 2e-39;
    spec.distributions[int(InputTensor::delta)].std = 1e-39;
  }
  spec.description = fmt::format("Drawn by attnres-check explore (trial {}).", index);
  return spec;
}

TrialOutcome classify_trial(const CaseResult& r) {
  switch (r.disposition) {
    case Disposition::passed: return TrialOutcome::passed;
    case Disposition::rejected_as_expected: return TrialOutcome::refused;  // as the kernel declared it may or must
    case Disposition::skipped: return TrialOutcome::skipped;
    case Disposition::not_run: return TrialOutcome::not_run;
    case Disposition::unexpected_rejection:  // a refusal the kernel's declaration does not allow
    case Disposition::failed:
    case Disposition::not_rejected:
    case Disposition::memory_violation:
    case Disposition::hazard:
    case Disposition::error: return TrialOutcome::finding;
  }
  return TrialOutcome::finding;
}

CommandOptions add_explore_command(CLI::App& app, ExploreArguments& args, CommonArguments& common) {
  CommandOptions command(app.add_subcommand(
      "explore", "run random legal problems on the kernel until one goes wrong, then shrink it into a repro bundle"));
  CLI::App* explore = command.app();
  explore->add_option("--budget", args.budget, "trials before giving up (exit 0: nothing went wrong)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  add_seed_option(command, args.seed, "the exploration's seed (default: fresh, printed)");
  explore->add_option("--out", args.out_dir, "where the finding's repro bundle goes (default explore-<trial>)");
  explore->add_flag("--force", args.force, "empty the bundle directory first if it holds anything");
  explore->add_flag("--no-layout-guard", args.no_layout_guard, "run the native kernel without its stride guard");
  explore->add_option("--max-tokens", args.max_tokens, "largest T drawn")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  explore->add_option("--max-hidden", args.max_hidden, "largest H drawn (a multiple of 8)")
      ->check(CLI::Range(8, kMaxHidden))
      ->capture_default_str();
  add_case_runner_options(command, common);
  command.after_parse([&args] {
    if (args.max_hidden % 8) throw UsageError("--max-hidden: must be a multiple of 8");
  });
  return command;
}

CommandOutput explore_command(const ExploreArguments& args, const CommonArguments& common, const Progress& progress) {
  CommandOutput out;
  const std::unique_ptr<CaseRunner> runner =
      make_case_runner(common.backend, case_run_options(common, args.no_layout_guard), out.notes);
  std::random_device fresh;
  const std::uint64_t seed = args.seed ? *args.seed : (std::uint64_t(fresh()) << 32) | fresh();
  std::mt19937_64 rng(seed);
  const ExploreLimits limits{args.max_tokens, args.max_hidden};
  out.text =
      fmt::format("explore: seed {} (--seed {} replays it), backend {}, device {}, kernel {}{}, budget {} trials\n",
                  seed, seed, runner->backend_name(), runner->device_description(),
                  common.backend.kernel.empty() ? "auto (the dispatcher)" : common.backend.kernel,
                  args.no_layout_guard ? ", layout guard off" : "", args.budget);
  std::array<int, 5> counts{};
  std::map<std::string, int> kernels, refusals, skip_reasons, not_run_reasons;
  // Each property asked (--check), by what it came to over the trials that judged it.
  std::map<CaseProperty, std::map<Disposition, int>> property_counts;
  // A problem the kernel's signature cannot express is drawn again (a few times), so that the
  // budget goes to what the kernel can be asked.
  constexpr int kRedraws = 16;
  int redrawn = 0;
  for (int i = 0; i < args.budget; ++i) {
    CaseSpec spec = draw_case(rng, i, limits);
    if (progress) progress(i, args.budget, spec.name);
    CaseResult result = runner->run(spec);
    for (int redraw = 0; result.disposition == Disposition::skipped && redraw < kRedraws; ++redraw, ++redrawn) {
      ++skip_reasons[result.detail];
      spec = draw_case(rng, i, limits);
      result = runner->run(spec);
    }
    for (const PropertyResult& p : result.properties) ++property_counts[p.property][p.disposition];
    const TrialOutcome outcome = classify_trial(result);
    ++counts[std::size_t(outcome)];
    ++kernels[result.kernel];
    if (outcome == TrialOutcome::refused) ++refusals[result.rejection.value_or(result.detail)];
    if (outcome == TrialOutcome::skipped) ++skip_reasons[result.detail];
    if (outcome == TrialOutcome::not_run) ++not_run_reasons[result.detail];
    if (outcome != TrialOutcome::finding) continue;
    out.text +=
        fmt::format("trial {} went wrong: {} on {} (T={}, H={}, num_blocks={}, max_blocks={}, strides {})\n  {}\n", i,
                    to_string(result.disposition), printable(result.kernel), spec.shape.tokens, spec.shape.hidden,
                    spec.shape.num_blocks, spec.shape.max_blocks, describe_strides(spec.shape, spec.strides),
                    printable(result.detail));
    const ShrinkOutcome shrunk = shrink_case(spec, *runner, "");
    out.text += shrunk.log;
    const std::filesystem::path dir = args.out_dir.empty() ? "explore-" + spec.name : args.out_dir;
    runner->write_bundle(shrunk.shrunk ? *shrunk.shrunk : spec, dir, args.force, out);
    write_file_atomically((dir / "original-case.json").string(), dump_json(case_to_json(spec), 2) + "\n");
    out.text += fmt::format("found after {} trials; the drawn case is {}/original-case.json\n", i + 1, dir.string());
    out.exit_code = kExitUnmet;
    return out;
  }
  std::string by_kernel;
  for (const auto& [name, n] : kernels) by_kernel += fmt::format("{}{} {}", by_kernel.empty() ? "" : ", ", n, name);
  out.text += fmt::format(
      "{} trials, nothing went wrong: {} passed, {} refused as the kernel declares it may or must, {} "
      "skipped (its signature cannot express them; {} such draws were drawn again), {} not run "
      "(kernels: {})\n",
      args.budget, counts[0], counts[1], counts[2], redrawn, counts[3], by_kernel);
  // Each reason with its count, so that what the kernel cannot be asked is seen.
  out.text += counted_lines("refused", refusals) + counted_lines("skipped", skip_reasons) +
              counted_lines("not run", not_run_reasons);
  for (const auto& [property, by_disposition] : property_counts) {
    std::string counted;
    for (const auto& [disposition, n] : by_disposition)
      counted += fmt::format("{}{} {}", counted.empty() ? "" : ", ", n, to_string(disposition));
    out.text += fmt::format("  check {}: {}\n", to_string(property), counted);
  }
  if (args.budget > 0 && counts[std::size_t(TrialOutcome::passed)] == 0) {
    out.notes += "no trial was computed and judged: every one was refused, skipped or not run\n";
    out.exit_code = kExitUnmet;
  }
  return out;
}

}  // namespace attnres
