#include "app/cli/commands/mutants.h"

#include <algorithm>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "kernels/mutants/mutant_entries.h"
#include "kernels/mutants/mutant_kernel.h"

namespace attnres {

int MutationScore::killed() const {
  return int(
      std::count_if(mutants.begin(), mutants.end(), [](const MutantOutcome& m) { return !m.killed_by.empty(); }));
}

double MutationScore::percent() const { return mutants.empty() ? 100.0 : 100.0 * killed() / double(mutants.size()); }

MutationScore score_mutants(const std::vector<CaseSpec>& cases, Backend& backend, const RunOptions& options,
                            const std::vector<std::string>& only, const Progress& progress) {
  MutationScore score;
  score.backend = backend.name();
  score.device = describe_device(backend.device());
  std::vector<std::string> kernels{mutant_kernel_name(Mutation::none)};
  for (const MutationInfo& m : mutations()) {
    if (!only.empty() && std::find(only.begin(), only.end(), m.name) == only.end()) continue;
    score.mutants.push_back({m.name, m.description, {}});
    kernels.push_back(mutant_kernel_name(m.mutation));
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (progress) progress(int(i), int(cases.size()), cases[i].name);
    const std::vector<CaseResult> results = run_case_on_kernels(cases[i], backend, options, kernels);
    ++score.cases;
    if (!meets_expectation(results.front().disposition)) {
      score.left_out.push_back(results.front());
      continue;
    }
    for (std::size_t m = 0; m < score.mutants.size(); ++m)
      if (!meets_expectation(results[m + 1].disposition)) score.mutants[m].killed_by.push_back(results[m + 1]);
  }
  return score;
}

namespace {

// What gave the mutant away, in a few words.
std::string giveaway(const CaseResult& r) {
  std::vector<std::string> parts;
  for (const Violation& v : r.violations) parts.push_back(v.to_string());
  if (const auto& c = r.comparison) {
    if (c->nan_count || c->inf_count)
      parts.push_back(fmt::format("{} NaN, {} Inf in output", c->nan_count, c->inf_count));
    if (c->mismatched)
      parts.push_back(fmt::format("{} elements out of tolerance, max-abs {:.3g}", c->mismatched, c->max_abs_error));
    if (c->prefix_mismatches) parts.push_back(fmt::format("prefix not bit-exact in {} elements", c->prefix_mismatches));
    if (c->blocks_mismatches)
      parts.push_back(fmt::format("written block not bit-exact in {} elements", c->blocks_mismatches));
  }
  if (parts.empty()) return r.detail.substr(0, r.detail.find('\n'));
  constexpr std::size_t kParts = 2;
  std::string text;
  for (std::size_t i = 0; i < std::min(parts.size(), kParts); ++i) text += (i ? "; " : "") + parts[i];
  if (parts.size() > kParts) text += fmt::format("; {} more", parts.size() - kParts);
  return text;
}

}  // namespace

std::string mutation_score_text(const MutationScore& score) {
  const int judged = score.cases - int(score.left_out.size());
  std::string text = fmt::format("mutants on backend {}, device {}: {} cases, {} of them met by the unmutated kernel\n",
                                 score.backend, score.device, score.cases, judged);
  for (const CaseResult& r : score.left_out)
    text += fmt::format("  left out: {} ({} with the unmutated kernel: cannot judge a mutation)\n", r.name,
                        to_string(r.disposition));
  text += fmt::format("{:<24} {:<9} {:<10} {}\n", "mutant", "verdict", "cases", "killed first by");
  for (const MutantOutcome& m : score.mutants) {
    const bool killed = !m.killed_by.empty();
    text += fmt::format("{:<24} {:<9} {:<10} {}\n", m.name, killed ? "killed" : "SURVIVED",
                        fmt::format("{}/{}", m.killed_by.size(), judged),
                        killed ? fmt::format("{} ({}: {})", m.killed_by.front().name,
                                             to_string(m.killed_by.front().disposition), giveaway(m.killed_by.front()))
                               : std::string("no case tells it from a correct kernel: ") + m.description);
  }
  text += fmt::format("mutation score: {} of {} mutants killed ({:.0f}%)\n", score.killed(), score.mutants.size(),
                      score.percent());
  return text;
}

nlohmann::json mutation_score_json(const MutationScore& score) {
  nlohmann::json mutants = nlohmann::json::array();
  for (const MutantOutcome& m : score.mutants) {
    nlohmann::json killers = nlohmann::json::array();
    for (const CaseResult& r : m.killed_by)
      killers.push_back({{"case", r.name},
                         {"location", r.location},
                         {"disposition", to_string(r.disposition)},
                         {"giveaway", giveaway(r)}});
    mutants.push_back(
        {{"name", m.name}, {"description", m.description}, {"killed", !m.killed_by.empty()}, {"killed_by", killers}});
  }
  nlohmann::json left_out = nlohmann::json::array();
  for (const CaseResult& r : score.left_out)
    left_out.push_back({{"case", r.name}, {"location", r.location}, {"disposition", to_string(r.disposition)}});
  return {{"schema_version", 1},      {"backend", score.backend},      {"device", score.device},
          {"cases", score.cases},     {"left_out", left_out},          {"mutants", mutants},
          {"killed", score.killed()}, {"total", score.mutants.size()}, {"percent", score.percent()}};
}

CommandOptions add_mutants_command(CLI::App& app, MutantsArguments& args, CommonArguments& common) {
  CommandOptions command(app.add_subcommand(
      "mutants", "run deliberately wrong kernels over the cases and report which cases catch which (mutation score)"));
  CLI::App* mutants = command.app();
  mutants->add_option("cases", args.paths, "case files or directories; default: the bundled cases");
  mutants->add_option("--filter", args.filters,
                      "only cases whose name contains this text or matches this glob (repeatable)");
  mutants->add_option("--only", args.only, "only these mutants (repeatable; names as the table prints them)");
  mutants->add_option("--json", args.json_path, "write which cases killed which mutant as JSON here");
  add_percent_option(command, "--fail-under", args.fail_under,
                     "exit 1 when the mutation score (percent of mutants killed) is below this, e.g. 100");
  add_device_option(command, common.backend.device);
  mutants
      ->add_option("--backend", common.backend.backend,
                   "auto: the CUDA device if there is one (mutants of a one-thread-per-token kernel); cpu: the "
                   "same mutants on the host")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  add_budget_options(command, common.budget);
  default_to_bundled_cases(command, args.paths);
  return command;
}

CommandOutput mutants_command(const MutantsArguments& args, const CommonArguments& common, const Progress& progress) {
  CommandOutput out;
  for (const std::string& name : args.only)
    if (std::none_of(mutations().begin(), mutations().end(), [&](const MutationInfo& m) { return name == m.name; })) {
      std::string known;
      for (const MutationInfo& m : mutations()) known += (known.empty() ? "" : ", ") + std::string(m.name);
      throw UsageError(fmt::format("--only: unknown mutant \"{}\" (known: {})", name, known));
    }
  LoadedCases loaded = load_cases(args.paths);
  require_writable_reports({{"--json", args.json_path}}, case_file_inputs(loaded));
  for (const CaseLoadError& e : loaded.errors) out.notes += printable(e.to_string()) + "\n";
  const std::vector<CaseSpec> cases = select_cases(std::move(loaded.cases), args.filters, "");
  if (cases.empty()) {
    if (args.paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
    out.notes += "no case selected\n";
    out.exit_code = loaded.errors.empty() ? kExitNoCases : kExitBadInput;
    return out;
  }
  std::unique_ptr<Backend> backend = make_backend(common.backend, out.notes);
  for (std::unique_ptr<KernelEntry>& entry : make_mutant_entries(backend->operand_place()))
    backend->add_kernel(std::move(entry));
  const RunOptions options = case_run_options(common, false);
  const MutationScore score = score_mutants(cases, *backend, options, args.only, progress);
  out.text = mutation_score_text(score);
  write_report(
      args.json_path, [&] { return dump_json(mutation_score_json(score), 2) + "\n"; }, out);
  if (!loaded.errors.empty())
    out.exit_code = kExitBadInput;
  else if (score.percent() < args.fail_under) {
    out.notes += fmt::format("mutation score {:.0f}% is under --fail-under {:g}%\n", score.percent(), args.fail_under);
    out.exit_code = kExitUnmet;
  }
  return out;
}

}  // namespace attnres
