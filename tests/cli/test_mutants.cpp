#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "app/cli/commands/mutants.h"
#include "app/engine/backend.h"
#include "kernels/mutants/mutant_entries.h"
#include "kernels/mutants/mutant_kernel.h"
#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

TEST(Mutants, Float16RoundingMatchesIeeeHalf) {
  EXPECT_EQ(round_through_float16(1.0f + 0x1p-10f), 1.0f + 0x1p-10f);  // representable
  EXPECT_EQ(round_through_float16(1.0f + 0x1p-11f), 1.0f);             // tie: to even
  EXPECT_EQ(round_through_float16(1.0f + 3 * 0x1p-12f), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_through_float16(-3.14159f), -3.140625f);
  EXPECT_EQ(round_through_float16(65504.0f), 65504.0f);  // largest finite half
  EXPECT_EQ(round_through_float16(65519.0f), 65504.0f);
  EXPECT_EQ(round_through_float16(65520.0f), INFINITY);
  EXPECT_EQ(round_through_float16(0x1p-24f * 0.75f), 0x1p-24f);  // subnormal quantum 2^-24
  EXPECT_EQ(round_through_float16(0x1p-24f * 0.25f), 0.0f);
  EXPECT_EQ(round_through_float16(0x1p-14f + 0x1p-25f), 0x1p-14f);
  EXPECT_TRUE(std::isnan(round_through_float16(NAN)));
}

TEST(Mutants, NamesAreUniqueAndSelectable) {
  std::set<std::string> names;
  for (const MutationInfo& m : mutations()) names.insert(mutant_kernel_name(m.mutation));
  EXPECT_EQ(names.size(), 16u);
  EXPECT_EQ(mutant_kernel_name(Mutation::none), "mutant:none");
  EXPECT_EQ(mutant_kernel_name(Mutation::eps_ignored), "mutant:eps-ignored");
}

// Small cases, each aimed at what the default N(0, 1) draws let through: sources of differing
// RMS, padded rows, a zero slot, logits in the hundreds, eps that matters (and differs from
// output_norm_eps), a denormal residual, rows past 65535; and one the unmutated kernel fails.
std::vector<CaseSpec> aimed_cases() {
  auto make = [](const char* name, int blocks, std::uint64_t seed) {
    CaseSpec spec = default_case(name, 3, 512, blocks + 1, blocks);
    spec.shape.block_write_idx = blocks;  // the next slot, as vLLM writes it
    spec.seed = seed;
    return spec;
  };
  CaseSpec depth = make("depth", 4, 1);
  depth.distributions[int(InputTensor::blocks)].block_scales = {1, 3, 0.5, 6};
  depth.distributions[int(InputTensor::prefix)].std = 4;
  CaseSpec padded = make("padded", 2, 2);
  padded.strides.prefix = padded.strides.delta = padded.strides.output = 520;
  CaseSpec zero_slot = make("zero-slot", 2, 3);
  zero_slot.distributions[int(InputTensor::blocks)].block_scales = {0, 1};
  CaseSpec large_logits = make("large-logits", 3, 4);
  for (InputTensor t : {InputTensor::prefix, InputTensor::blocks}) large_logits.distributions[int(t)].mean = 1.0;
  large_logits.distributions[int(InputTensor::qk_weight)] = DistributionSpec{DistributionKind::normal, 4.0, 0.1};
  CaseSpec distinct_eps = make("distinct-eps", 2, 6);
  distinct_eps.eps = 1e-3;
  distinct_eps.shape.eps = 1e-3f;
  for (InputTensor t : {InputTensor::prefix, InputTensor::blocks}) distinct_eps.distributions[int(t)].std = 0.02;
  distinct_eps.distributions[int(InputTensor::delta)].std = 0.005;
  CaseSpec denormal = make("denormal", 1, 7);
  denormal.distributions[int(InputTensor::prefix)].std = 2e-39;
  denormal.distributions[int(InputTensor::delta)].std = 1e-39;
  CaseSpec many_tokens = default_case("many-tokens", 70000, 8, 2, 1);
  many_tokens.seed = 8;
  CaseSpec reject = make("expects-reject", 1, 5);
  reject.expectation_written = true;
  reject.expect = Expectation::reject;
  return {depth, padded, zero_slot, large_logits, distinct_eps, denormal, many_tokens, reject};
}

std::vector<std::string> survivors(const MutationScore& score) {
  std::vector<std::string> names;
  for (const MutantOutcome& m : score.mutants)
    if (m.killed_by.empty()) names.push_back(m.name);
  return names;
}

std::vector<CaseSpec> without(std::vector<CaseSpec> cases, const std::string& name) {
  cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const CaseSpec& c) { return c.name == name; }),
              cases.end());
  return cases;
}

class MutantScore : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
    for (auto& entry : make_mutant_entries(OperandPlace::host)) backend_->add_kernel(std::move(entry));
  }
  MutationScore score(const std::vector<CaseSpec>& cases) {
    return score_mutants(cases, *backend_, RunOptions{}, {}, nullptr);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(MutantScore, AimedCasesKillEveryMutantAndLeaveOutWhatTheUnmutatedKernelFails) {
  const MutationScore s = score(aimed_cases());
  EXPECT_EQ(s.cases, 8);
  ASSERT_EQ(s.left_out.size(), 1u);
  EXPECT_EQ(s.left_out[0].name, "expects-reject");
  EXPECT_EQ(s.left_out[0].disposition, Disposition::not_rejected);
  EXPECT_EQ(survivors(s), std::vector<std::string>{});
  EXPECT_EQ(s.killed(), 16);
  EXPECT_DOUBLE_EQ(s.percent(), 100.0);
  for (const MutantOutcome& m : s.mutants)
    for (const CaseResult& r : m.killed_by) EXPECT_FALSE(meets_expectation(r.disposition)) << m.name << " " << r.name;
}

// Each aimed case is the only one that catches its mutant: without it, exactly that one survives
// (eps-ignored has three; a bias shows in every case).
TEST_F(MutantScore, WithoutItsCaseTheMutantSurvives) {
  // Dropping eps shows wherever a source's mean square is 0 or near eps: three cases.
  EXPECT_EQ(survivors(score(without(without(without(aimed_cases(), "zero-slot"), "distinct-eps"), "denormal"))),
            (std::vector<std::string>{"eps-ignored", "eps-swapped", "p-flushed-to-zero"}));
  EXPECT_EQ(survivors(score(without(aimed_cases(), "distinct-eps"))), std::vector<std::string>{"eps-swapped"});
  EXPECT_EQ(survivors(score(without(aimed_cases(), "denormal"))), std::vector<std::string>{"p-flushed-to-zero"});
  EXPECT_EQ(survivors(score(without(aimed_cases(), "many-tokens"))),
            std::vector<std::string>{"tokens-past-65535-skipped"});
  EXPECT_EQ(survivors(score(without(aimed_cases(), "large-logits"))), std::vector<std::string>{"softmax-without-max"});
  EXPECT_EQ(survivors(score(without(aimed_cases(), "padded"))), std::vector<std::string>{"hard-coded-row-stride"});
  const MutationScore s = score(without(aimed_cases(), "padded"));
  EXPECT_EQ(s.killed(), 15);
  const nlohmann::json j = mutation_score_json(s);
  EXPECT_EQ(j["killed"], 15);
  EXPECT_EQ(j["total"], 16);
  EXPECT_EQ(j["mutants"][9]["name"], "hard-coded-row-stride");
  EXPECT_EQ(j["mutants"][9]["killed"], false);
  EXPECT_NE(mutation_score_text(s).find("hard-coded-row-stride    SURVIVED"), std::string::npos);
}

TEST(MutantsCommand, FailUnderAndUnknownMutants) {
  testing::TempDir dir;
  nlohmann::json weak = case_to_json(default_case("weak", 2, 512, 2, 2));
  const std::string file = dir.file("weak.json", weak.dump());
  CommandOutput out = testing::run_cli({"mutants", file, "--backend", "cpu", "--fail-under", "100"});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  EXPECT_NE(out.notes.find("is under --fail-under 100%"), std::string::npos) << out.notes;
  out = testing::run_cli({"mutants", file, "--backend", "cpu", "--only", "delta-ignored", "--fail-under", "100",
                          "--json", (dir.path() / "m.json").string()});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text;
  EXPECT_NE(out.text.find("mutation score: 1 of 1 mutants killed (100%)"), std::string::npos) << out.text;
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(dir.path() / "m.json"))["mutants"][0]["killed_by"][0]["case"],
            "weak");
  EXPECT_THROW(testing::run_cli({"mutants", file, "--backend", "cpu", "--only", "no-such"}), UsageError);
}

// On the GPU (ctest label gpu).

// The mutants run on the device (one thread per token) where the backend is CUDA: every
// mutant must be caught by exactly the cases that catch its host twin (the eps, denormal and
// row-count mutants only by cases/numerics.json).
TEST_F(Gpu, DeviceMutantsAreCaughtByTheCasesThatCatchTheHostOnes) {
  const std::vector<std::string> cases{"mutants",
                                       testing::source_path("cases/depth.json"),
                                       testing::source_path("cases/portable-padded.json"),
                                       testing::source_path("cases/numerics.json"),
                                       "--filter",
                                       "depth-*",
                                       "--filter",
                                       "zero-*",
                                       "--filter",
                                       "large-logits-*",
                                       "--filter",
                                       "*-t3-*",
                                       "--filter",
                                       "numerics-*"};
  std::vector<std::string> on_gpu = cases, on_cpu = cases;
  on_gpu.insert(on_gpu.end(), {"--backend", "cuda", "--fail-under", "100"});
  on_cpu.insert(on_cpu.end(), {"--backend", "cpu"});
  const BinaryRun gpu = run_binary(on_gpu), cpu = run_binary(on_cpu);
  EXPECT_EQ(gpu.exit_code, kExitOk) << gpu.output;
  ASSERT_EQ(gpu.report["mutants"].size(), mutations().size()) << gpu.output;
  EXPECT_EQ(gpu.report["backend"], "cuda");
  EXPECT_EQ(gpu.report["left_out"].size(), 0u);
  for (std::size_t m = 0; m < mutations().size(); ++m) {
    std::vector<std::string> gpu_killers, cpu_killers;
    for (const auto& k : gpu.report["mutants"][m]["killed_by"]) gpu_killers.push_back(k["case"]);
    for (const auto& k : cpu.report["mutants"][m]["killed_by"]) cpu_killers.push_back(k["case"]);
    EXPECT_EQ(gpu_killers, cpu_killers) << gpu.report["mutants"][m]["name"];
    EXPECT_FALSE(gpu_killers.empty()) << gpu.report["mutants"][m]["name"];
  }
}

}  // namespace
}  // namespace attnres
