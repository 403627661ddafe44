#include "app/bundle/bundle.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/casefile/safetensors.h"
#include "app/engine/runner.h"
#include "app/report/error_map_image.h"
#include "app/report/git_revision.h"
#include "app/report/report.h"
#include "app/report/result_json.h"
#include "kernels/external/kernel_spec.h"

namespace attnres {

using nlohmann::json;

namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path.string(), text);
}

json environment(const Backend& backend, const BackendOptions& options) {
  const std::string& kernel = options.kernel;
  // Versions a machine cannot give (no driver) are "none" in the bundle, not an error.
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  cudaGetLastError();
  utsname host{};
  uname(&host);
  const DeviceDescription device = backend.device();
  auto version = [](int v) { return v ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : std::string("none"); };
  return {{"tool_version", ATTNRES_VERSION},
          {"git_revision", kGitRevision},
          {"backend", backend.name()},
          {"kernel", kernel.empty() ? "the case's own (auto: the dispatcher)" : kernel},
          {"gpu", device.present ? device.name : "none"},
          {"compute_capability", device.present ? fmt::format("{}.{}", device.cc_major, device.cc_minor) : "none"},
          {"cuda_driver", version(driver)},
          {"cuda_runtime", version(runtime)},
          {"native_images_in_build", compiled_native_images()},
          {"host", fmt::format("{} {} {}", host.sysname, host.release, host.machine)},
          {"torch_library", options.torch_library},
          {"signature", options.signature},
          {"arguments", options.arguments},
          {"profile", options.profile}};
}

// One shell word whatever `text` holds: as is where every character is safe unquoted, else in
// single quotes with each ' written as '\''.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("_./:=,+-@%").find(char(c)) != std::string_view::npos;
  });
  if (plain) return text;
  std::string word = "'";
  for (const char c : text) word += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return word + "'";
}

std::string backend_flags(const BackendOptions& backend) {
  std::string flags;
  if (backend.backend != "auto") flags += " --backend " + backend.backend;
  if (!backend.kernel.empty()) flags += " --kernel " + shell_word(backend.kernel);
  if (!backend.torch_library.empty()) flags += " --torch-library " + shell_word(backend.torch_library);
  if (parse_kernel_spec(backend.kernel).takes_option("--signature")) {
    flags += " --signature " + backend.signature;
    for (const std::string& argument : backend.arguments) flags += " --arg " + shell_word(argument);
  }
  if (!backend.profile.empty()) flags += " --profile " + shell_word(backend.profile);
  if (backend.backend == "cpu") {
    flags += " --device-model " + shell_word(backend.device_model);
    if (backend.native_images) flags += " --native-images " + shell_word(*backend.native_images);
  }
  return flags;
}

// `text` as a fenced code block: markdown shows it verbatim, whatever it holds (a heading, a
// link, a "How to reproduce" of someone else's), since the fence is longer than any run of
// backticks inside.
std::string fenced(const std::string& text) {
  const std::string safe = printable_lines(text);
  std::size_t longest = 0, run = 0;
  for (const char c : safe) longest = std::max(longest, run = c == '`' ? run + 1 : 0);
  const std::string fence(std::max<std::size_t>(3, longest + 1), '`');
  return fmt::format("{}text\n{}\n{}\n", fence, safe, fence);
}

std::string report_markdown(const CaseSpec& spec, const CaseResult& r, const json& env, const std::string& run_line,
                            const std::string& replay_line, bool kernel_ran, bool error_map) {
  std::string md = fmt::format("# AttnRes: `{}` is {}\n\n", spec.name, to_string(r.disposition));
  md += spec.description.empty() ? "(no description in the case)\n\n"
                                 : "The case's description:\n\n" + fenced(spec.description) + "\n";
  md += "## What was fed\n\n";
  const AttnResShape& s = spec.shape;
  md += fmt::format("- T={} tokens, H={}, blocks [T, MAXB={}, H] with num_blocks={}, block_write_idx={}\n", s.tokens,
                    s.hidden, s.max_blocks, s.num_blocks, s.block_write_idx);
  md += fmt::format("- delta: {}, output norm: {}, eps={:g}, output_norm_eps={:g}, dtype bf16, seed {}\n",
                    s.has_delta ? "yes" : "no", s.has_output_norm ? "yes" : "no", spec.eps, spec.output_norm_eps,
                    spec.seed);
  md += fmt::format("- strides (elements): {}\n", describe_strides(s, spec.strides));
  md +=
      fmt::format("- kernel requested: {}, layout guard: {}\n", to_string(spec.kernel), r.layout_guard ? "on" : "off");
  md += "- input checksums (logical elements; mix64sum, docs/cases.md):\n";
  for (const auto& [name, sum] : r.input_checksums) md += fmt::format("  - `{}`: `{}`\n", name, sum);
  md += "\n## What came out\n\n";
  md += fmt::format("- verdict: **{}** (the kernel had to {})\n", to_string(r.disposition),
                    printable(r.expectation.empty() ? std::string("run it: it was not judged") : r.expectation));
  md += fmt::format("- kernel: {} — {}\n", printable(r.kernel), printable(r.dispatch_reason));
  if (r.rejection) md += "- rejected before launch with this message:\n\n" + fenced(*r.rejection) + "\n";
  if (r.comparison) {
    const Comparison& c = *r.comparison;
    md += fmt::format(
        "- max-abs error {:.6g} at [{}, {}]: kernel {:.6g}, reference ({}) {:.6g}; tolerance |out-ref| <= {:g} + "
        "{:g}*|ref|\n",
        c.max_abs_error, c.worst_token, c.worst_column, c.worst_value, c.reference, c.worst_reference, c.atol, c.rtol);
    md += fmt::format("- {}\n", c.mismatch_summary());
    md += fmt::format("- NaN in output: {}, Inf in output: {}; no CUDA fault\n", c.nan_count, c.inf_count);
    md += fmt::format(
        "- prefix bit-exact: {}; written block bit-exact: {}\n",
        c.prefix_mismatches ? fmt::format("no ({} elements; first {})", c.prefix_mismatches, c.first_prefix_mismatch)
                            : "yes",
        c.blocks_mismatches ? fmt::format("no ({} elements; first {})", c.blocks_mismatches, c.first_blocks_mismatch)
                            : "yes");
  }
  if (!r.violations.empty()) {
    md += "- memory-safety violations:\n";
    for (const Violation& v : r.violations) md += fmt::format("  - {}\n", v.to_string());
  }
  if (!r.properties.empty()) {
    md += "- properties (`checks` in case.json: each is judged again when the case runs):\n";
    for (const PropertyResult& p : r.properties)
      md += fmt::format("  - {}: **{}**: {}\n", to_string(p.property), to_string(p.disposition), printable(p.detail));
  }
  md += "\nDetail:\n\n" + fenced(r.detail);
  md += "\n## Environment\n\n";
  for (auto it = env.begin(); it != env.end(); ++it) md += fmt::format("- {}: {}\n", it.key(), it.value().dump());
  md += "\n## How to reproduce\n\n";
  md += "From this directory, with attnres-check built (regenerates the inputs bit-exact from the seed):\n\n";
  md += fmt::format("```\n{}\n```\n\n", run_line);
  if (!replay_line.empty()) {
    md += "Replaying the captured tensors instead:\n\n";
    md += fmt::format("```\n{}\n```\n\n", replay_line);
  }
  md +=
      "Without attnres-check (PyTorch float64 reference; also calls vLLM's and FlashInfer's entry points where they "
      "import, and the kernel this bundle was made with):\n\n";
  md += "```\npython3 repro.py\n```\n\n";
  if (error_map)
    md +=
        "![|out - ref| over [T, H]](error-map.png)\n\n`error-map.png`: |out - ref| over [T, H] (tokens down, hidden "
        "across, "
        "each cell the largest difference among its elements): dark blue to green within tolerance (log scale), orange "
        "to dark red where some to all of the cell's elements are out of tolerance, black where a non-finite output is "
        "off.\n\n";
  md += kernel_ran
            ? "`outputs.safetensors` holds the kernel's output, prefix and blocks after the run, and the reference.\n"
            : "The kernel did not run, so there is no `outputs.safetensors`.\n";
  if (r.sanitizer)
    md += fmt::format("`{}` is compute-sanitizer {}'s report of the run that found the hazard.\n", r.sanitizer->report,
                      r.sanitizer->tool);
  return md;
}

SafetensorsFile outputs_file(const CaseArtifacts& a) {
  const AttnResShape& s = a.after.shape;
  SafetensorsFile file;
  file.metadata["format"] = "attnres-check outputs v1";
  add_strided(file, a.after.output, 2, "output");
  add_strided(file, a.after.prefix, 2, "prefix_after");
  add_strided(file, a.after.blocks, 3, "blocks_after");
  SafetensorEntry reference{"reference_output", "F64", {s.tokens, s.hidden}, {}};
  reference.bytes.resize(a.reference.size() * sizeof(double));
  if (!reference.bytes.empty())
    std::memcpy(reference.bytes.data(), a.reference.data(), reference.bytes.size());  // none: T = 0
  file.tensors.push_back(std::move(reference));
  return file;
}

}  // namespace

CaseResult write_repro_bundle(const CaseSpec& spec, Backend& backend, const RunOptions& options,
                              const BackendOptions& backend_options, const std::filesystem::path& dir, bool force,
                              CommandOutput& out, const CaseResult* judged_in_run) {
  namespace fs = std::filesystem;
  const DirectoryLock lock = [&] {
    try {
      return claim_output_directory(dir, force);
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
  }();
  std::optional<CaseArtifacts> artifacts;
  CaseResult result = judged_in_run ? *judged_in_run : run_case(spec, backend, options, nullptr, &artifacts);

  CaseSpec bundled = spec;
  bundled.file = "case.json";
  bundled.pointer.clear();
  bundled.checks = united(spec.checks, options.properties);  // the case replays what this run judged
  write_text(dir / "case.json", dump_json(case_to_json(bundled), 2) + "\n");
  std::vector<std::string> written{"REPORT.md", "case.json"};
  // Without a run's artifacts (a rejection, not-run, a fault, or a run that took its worker down)
  // the inputs are made here, within the host budget.
  const bool inputs_fit = artifacts || !host_inputs_refusal(spec, backend, options);
  if (inputs_fit) {
    std::optional<CaseTensors> made_here;
    const CaseTensors& inputs = artifacts ? artifacts->inputs : made_here.emplace(make_case_tensors(spec));
    // A run that ended before its checksums (its worker killed, refused first) gets them here, so
    // that REPORT.md and result.json name the inputs the bundle holds.
    if (result.input_checksums.empty()) result.input_checksums = input_checksums(inputs);
    write_safetensors((dir / "inputs.safetensors").string(), inputs_file(spec, inputs));
    written.push_back("inputs.safetensors");
  }
  bool drew_error_map = false;
  if (artifacts) {
    write_safetensors((dir / "outputs.safetensors").string(), outputs_file(*artifacts));
    written.push_back("outputs.safetensors");
    if (spec.shape.tokens == 0) {
      // An empty batch has no output to map.
    } else if (can_write_png()) {
      write_error_map_png((dir / "error-map.png").string(),
                          error_map(artifacts->after.output, artifacts->reference, spec.atol, spec.rtol));
      written.push_back("error-map.png");
      drew_error_map = true;
    } else {
      out.notes += "error-map.png not written: this build has no libpng\n";
    }
  }
  const json env = environment(backend, backend_options);
  write_text(dir / "environment.json", dump_json(env, 2) + "\n");
  CaseResult recorded = result;
  std::string flags = backend_flags(backend_options) + (options.disable_layout_guard ? " --no-layout-guard" : "");
  // A hazard replays under its tool, which runs each case from its seed: no line with --inputs.
  std::string replay_line = "attnres-check run case.json --inputs inputs.safetensors" + flags;
  if (recorded.sanitizer) {
    SanitizerFinding& finding = *recorded.sanitizer;
    const std::string report = "compute-sanitizer-" + finding.tool + ".txt";
    std::error_code ec;
    fs::copy_file(finding.report, dir / report, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      out.notes += fmt::format("{}: the compute-sanitizer report {} could not be copied into the bundle: {}\n",
                               printable(spec.name), printable(finding.report), ec.message());
    } else {
      written.push_back(report);
      finding.report = report;  // the bundle names its own copy
    }
    flags += " --sanitizer " + finding.tool;
    replay_line.clear();
  }
  write_text(dir / "result.json", dump_json(result_json(recorded), 2) + "\n");
  const std::string run_line = "attnres-check run case.json" + flags;
  // $ATTNRES_CHECK names the binary where it is not on PATH; each run's exit code is its verdict.
  auto with_binary = [](const std::string& line) {
    return "\"${ATTNRES_CHECK:-attnres-check}\"" + line.substr(line.find(' '));
  };
  write_text(
      dir / "replay.sh",
      fmt::format("#!/bin/sh\n# Replays this bundle; run from its directory (ATTNRES_CHECK=path/to/attnres-check if\n"
                  "# it is not on PATH). {}\n{}\n{}",
                  replay_line.empty() ? "Regenerates the inputs from the seed."
                                      : "Regenerated inputs first, then the captured tensors.",
                  with_binary(run_line), replay_line.empty() ? "" : with_binary(replay_line) + "\n"));
  fs::permissions(dir / "replay.sh", fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
  write_text(dir / "repro.py", attnres_repro_script());
  write_text(dir / "attnres_binding.py", attnres_binding_script());
  write_text(dir / "REPORT.md",
             report_markdown(spec, recorded, env, run_line, replay_line, artifacts.has_value(), drew_error_map));

  written.insert(written.end(), {"environment.json", "result.json", "replay.sh", "repro.py", "attnres_binding.py"});
  out.text += fmt::format("{}: {}\n  {}\nbundle written to {}/ ({})\n", spec.name, to_string(result.disposition),
                          printable(result.detail), printable(dir.string()), fmt::join(written, ", "));
  return result;
}

}  // namespace attnres
