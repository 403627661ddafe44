#include "app/cli/commands/shrink.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/cli/command_support.h"
#include "app/engine/runner.h"
#include "app/workers/make_case_runner.h"
#include "kernels/registry/layout_guard.h"

namespace attnres {

namespace {

// Smaller variants of a case, most aggressive first; each is still a valid case.
std::vector<std::pair<std::string, CaseSpec>> reductions(const CaseSpec& c) {
  std::vector<std::pair<std::string, CaseSpec>> out;
  const AttnResShape& s = c.shape;
  auto add = [&](std::string what, auto change) {
    CaseSpec next = c;
    change(next);
    const AttnResShape& to = next.shape;
    if (to.tokens != s.tokens || to.hidden != s.hidden || to.max_blocks != s.max_blocks)
      next.strides = resized_strides(c.strides, s, to);
    if (!layout_violation(next.shape, next.strides, INT64_MAX)) out.emplace_back(std::move(what), std::move(next));
  };
  if (s.tokens > 1) add(fmt::format("T {} -> 1", s.tokens), [](CaseSpec& n) { n.shape.tokens = 1; });
  if (s.tokens > 2)
    add(fmt::format("T {} -> {}", s.tokens, s.tokens / 2), [&](CaseSpec& n) { n.shape.tokens = s.tokens / 2; });
  if (s.tokens > 1)
    add(fmt::format("T {} -> {}", s.tokens, s.tokens - 1), [&](CaseSpec& n) { n.shape.tokens = s.tokens - 1; });
  if (s.num_blocks > 0)
    add(fmt::format("num_blocks {} -> {}", s.num_blocks, s.num_blocks - 1), [&](CaseSpec& n) { n.shape.num_blocks--; });
  const int needed_blocks = std::max(s.num_blocks, s.block_write_idx + 1);
  if (s.max_blocks > needed_blocks)
    add(fmt::format("max_blocks {} -> {}", s.max_blocks, needed_blocks), [&](CaseSpec& n) {
      n.shape.max_blocks = needed_blocks;
      std::vector<double>& scales = n.distributions[int(InputTensor::blocks)].block_scales;
      if (scales.size() > std::size_t(needed_blocks)) scales.resize(std::size_t(needed_blocks));
    });
  if (s.block_write_idx >= 0) add("no block write", [](CaseSpec& n) { n.shape.block_write_idx = -1; });
  if (s.has_delta) add("no delta", [](CaseSpec& n) { n.shape.has_delta = false; });
  if (s.has_output_norm) add("no output norm", [](CaseSpec& n) { n.shape.has_output_norm = false; });
  // H by halves rounded down to a multiple of 8, then by one step of 8: an H of 8 times an odd
  // number shrinks too.
  const int half_hidden = s.hidden / 2 / 8 * 8;
  if (half_hidden >= 8)
    add(fmt::format("H {} -> {}", s.hidden, half_hidden), [&](CaseSpec& n) { n.shape.hidden = half_hidden; });
  if (s.hidden - 8 > half_hidden)
    add(fmt::format("H {} -> {}", s.hidden, s.hidden - 8), [&](CaseSpec& n) { n.shape.hidden = s.hidden - 8; });
  // Row padding: halved, then none (the blocks' once they are token-major).
  const bool token_major_blocks = c.strides.blocks_token == s.max_blocks * c.strides.blocks_row;
  struct Padded {
    Operand operand;
    std::int64_t AttnResStrides::*stride;
  };
  for (const Padded p :
       {Padded{Operand::prefix, &AttnResStrides::prefix}, Padded{Operand::delta, &AttnResStrides::delta},
        Padded{Operand::output, &AttnResStrides::output}, Padded{Operand::blocks, &AttnResStrides::blocks_row}}) {
    const std::int64_t padding = c.strides.*p.stride - s.hidden;
    if (p.operand == Operand::blocks && !token_major_blocks) continue;
    auto pad_to = [&](std::int64_t to) {
      return [&, to](CaseSpec& n) {
        n.strides.*p.stride = s.hidden + to;
        if (p.operand == Operand::blocks) set_token_major_blocks(n.strides, s.max_blocks, s.hidden + to);
      };
    };
    if (padding > 0) add(fmt::format("{} padding {} -> 0", to_string(p.operand), padding), pad_to(0));
    if (padding > 1)
      add(fmt::format("{} padding {} -> {}", to_string(p.operand), padding, padding / 2), pad_to(padding / 2));
  }
  if (!token_major_blocks)
    add("blocks made token-major", [&](CaseSpec& n) { set_token_major_blocks(n.strides, s.max_blocks, s.hidden); });
  for (int i = 0; i < kOperandCount; ++i)
    if (const std::int64_t offset = c.strides.storage_offset[i])
      add(fmt::format("{} storage offset {} -> 0", to_string(Operand(i)), offset),
          [&](CaseSpec& n) { n.strides.storage_offset[i] = 0; });
  return out;
}

// A run that produced a wrong answer: out of tolerance, prefix/blocks not exact, or memory damage.
bool went_wrong(const CaseResult& r) {
  return !r.violations.empty() || (r.comparison && (!r.comparison->within_tolerance() || !r.comparison->exact_state()));
}

double case_size(const CaseSpec& c) { return double(c.shape.tokens) * (c.shape.num_blocks + 1) * c.shape.hidden; }

}  // namespace

ShrinkOutcome shrink_case(const CaseSpec& original_spec, CaseRunner& runner, const std::string& verdict) {
  ShrinkOutcome out;
  CaseSpec current = original_spec;
  const CaseResult original = runner.run(current);
  const std::string target = verdict.empty() ? to_string(original.disposition) : verdict;
  if (!parse_disposition(target)) throw UsageError(fmt::format("--verdict: unknown disposition \"{}\"", target));
  if (target != to_string(original.disposition)) {
    out.log =
        fmt::format("{}: is {}, not {}; nothing to shrink\n", current.name, to_string(original.disposition), target);
    return out;
  }
  // A case expecting the layout guard's refusal stays one: a smaller case with dense rows would
  // fail a correct kernel (nothing to refuse), whichever kernel shrank it; and its message names the
  // shrunk layout.
  const bool expects_guard_refusal = current.expect == Expectation::reject &&
                                     dense_rows_violation(current.shape, current.strides) == current.expected_message;
  out.log = fmt::format("{}: keeping disposition {}{} (T={}, H={}, num_blocks={})\n", current.name, target,
                        went_wrong(original) ? " with a wrong answer" : "", current.shape.tokens, current.shape.hidden,
                        current.shape.num_blocks);
  for (bool progress = true; progress && out.trials < 400;) {
    progress = false;
    for (auto& [what, candidate] : reductions(current)) {
      if (expects_guard_refusal && !dense_rows_violation(candidate.shape, candidate.strides)) continue;
      ++out.trials;
      const CaseResult trial = runner.run(candidate);
      // A wrong answer must stay wrong: "not-rejected" alone also holds once the bug is gone.
      if (to_string(trial.disposition) != target || went_wrong(trial) != went_wrong(original)) continue;
      out.log += fmt::format("  kept: {}\n", what);
      current = std::move(candidate);
      progress = true;
      break;
    }
  }
  // The expected rejection message names the layout (strides, H), which shrinking changed: where
  // the original's message is what the guarded kernel says, the shrunk case expects what the
  // guarded kernel says about the shrunk layout, so it passes its own regression check.
  if (expects_guard_refusal) {
    const std::string message = *dense_rows_violation(current.shape, current.strides);
    if (message != current.expected_message) {
      current.expected_message = message;
      out.log += fmt::format("  expected message updated to the shrunk layout's: {}\n", quoted_literal(message));
    }
  } else if (current.expect == Expectation::reject && !current.expected_message.empty()) {
    // The original already ran guarded unless --no-layout-guard was given.
    const CaseResult before = runner.options().disable_layout_guard ? runner.run(original_spec, false) : original;
    const CaseResult after = runner.run(current, false);
    if (before.rejection == original_spec.expected_message && after.rejection &&
        *after.rejection != current.expected_message) {
      current.expected_message = *after.rejection;
      out.log += fmt::format("  expected message updated to the shrunk layout's: {}\n",
                             quoted_literal(current.expected_message));
    }
  }
  current.name += "-shrunk";
  current.description =
      fmt::format("Shrunk by attnres-check from {} ({}); still {}.", original.location, original.name, target);
  out.log += fmt::format(
      "{} trials; smallest case: T={}, H={}, max_blocks={}, num_blocks={}, strides {} ({:.3g}x smaller)\n", out.trials,
      current.shape.tokens, current.shape.hidden, current.shape.max_blocks, current.shape.num_blocks,
      describe_strides(current.shape, current.strides), case_size(original_spec) / case_size(current));
  out.shrunk = std::move(current);
  return out;
}

CommandOptions add_shrink_command(CLI::App& app, ShrinkArguments& args, CommonArguments& common) {
  CommandOptions command(app.add_subcommand("shrink", "reduce a case while its disposition stays the same"));
  add_one_case_options(command, args.case_path, args.case_name, args.no_layout_guard);
  command.app()->add_option(
      "--out", args.out_path,
      "where to write the smallest case (default <case name>-shrunk.json in the current directory)");
  command.app()->add_option("--verdict", args.verdict, "disposition to keep (default: the original case's)");
  add_case_runner_options(command, common);
  return command;
}

CommandOutput shrink_command(const ShrinkArguments& args, const CommonArguments& common) {
  CommandOutput out;
  const CaseSpec spec = load_single_case(args.case_path, args.case_name);
  // The shrunk case keeps the name with "-shrunk" (shrink_case): where it goes is known now.
  const std::string path = args.out_path.empty() ? spec.name + "-shrunk.json" : args.out_path;
  require_writable_reports({{"--out", path}}, {{"case file", args.case_path}});
  const std::unique_ptr<CaseRunner> runner =
      make_case_runner(common.backend, case_run_options(common, args.no_layout_guard), out.notes);
  const ShrinkOutcome shrunk = shrink_case(spec, *runner, args.verdict);
  out.text = shrunk.log;
  if (!shrunk.shrunk) {
    out.exit_code = kExitUnmet;
    return out;
  }
  // The shrunk case asks for the properties it was shrunk under: run alone, it fails as it did here.
  CaseSpec written = *shrunk.shrunk;
  written.checks = united(written.checks, common.properties);
  if (is_standard_output(path)) {
    out.text += dump_json(case_to_json(written), 2) + "\n";
    return out;
  }
  write_report_file(path, dump_json(case_to_json(written), 2) + "\n");
  out.text += fmt::format("written to {}\n", path);
  return out;
}

}  // namespace attnres
