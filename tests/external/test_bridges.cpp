// The torch-op and Python bridges on host tensors (CI has Debian's CPU torch): the bundled
// cases through test ops and test functions written apart from the tool's kernels; the seed bug
// caught through each bridge; refusals, missing ops, wrong results and import errors reported
// as docs/plugins.md describes.
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "tests/cuda_test_support.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using nlohmann::json;
using testing::read_file;
using testing::run_cli;
using testing::TempDir;

const std::string kSeedMessage =
    "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168";

class Bridges : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef __SANITIZE_ADDRESS__
    GTEST_SKIP() << "libtorch and libpython are not built with AddressSanitizer";
#endif
    setenv("ATTNRES_BRIDGE_DIR", ATTNRES_BRIDGE_DIR, 1);
    setenv("PYTHONPATH", ATTNRES_PYTHON_TEST_DIR, 1);
  }

  // Runs the CLI with a JSON report and returns it.
  json run(std::vector<std::string> args, int expected_exit) {
    const std::string report = (dir_.path() / "r.json").string();
    args.insert(args.end(), {"--backend", "cpu", "--json", report});
    const CommandOutput out = run_cli(args);
    EXPECT_EQ(out.exit_code, expected_exit) << out.text << out.notes;
    return json::parse(read_file(report));
  }

  static const json& find(const json& report, const std::string& name) {
    for (const json& c : report["cases"])
      if (c["name"] == name) return c;
    throw std::runtime_error("no case " + name);
  }

  TempDir dir_;
};

class TorchBridge : public Bridges {
 protected:
  void SetUp() override {
    Bridges::SetUp();
    if (IsSkipped()) return;
    if (!ATTNRES_HAVE_TORCH_BRIDGE) GTEST_SKIP() << "CMake found no Torch: the torch-op bridge is not built";
  }
  std::vector<std::string> op(const std::string& name, std::vector<std::string> cases) {
    cases.insert(cases.begin(), "run");
    cases.insert(cases.end(),
                 {"--kernel", "torch-op:attnres_test::" + name, "--torch-library", ATTNRES_TORCH_TEST_OPS});
    return cases;
  }
};

TEST_F(TorchBridge, VllmsSchemaRunsWhatItCanExpressAndRefusesTheSeedRepro) {
  std::vector<std::string> args =
      op("kimi_k3_attn_res", {testing::source_path("cases/public.json"), testing::source_path("cases/guard.json")});
  args.insert(args.end(), {"--profile", "vllm-op"});
  const json r = run(args, kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 5 + 1);  // delta, output norm, no write; guard-padded-blocks-ok
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 3);
  // What vLLM's schema cannot express is skipped, not a failure and not a missing device.
  EXPECT_EQ(r["summary"]["by_disposition"]["skipped"], 31 + 1);
  const json& seed = find(r, "seed-repro-prefix-stride-7175");
  EXPECT_EQ(seed["rejection"], kSeedMessage);  // TORCH_CHECK's text, no C++ backtrace
  EXPECT_NE(seed["detail"].get<std::string>().find("(raised as c10::Error)"), std::string::npos) << seed["detail"];
  EXPECT_EQ(find(r, "guard-no-delta-prefix-stride")["detail"],
            "attnres_test::kimi_k3_attn_res takes delta as a Tensor (not Tensor?): "
            "a case without it cannot be expressed");
  EXPECT_NE(find(r, "public-t1-b7-delta-norm-write3")["detail"].get<std::string>().find("takes no block_write_idx"),
            std::string::npos);
}

TEST_F(TorchBridge, TheSeedBugIsCaughtThroughTheOp) {
  const json r = run(op("kimi_k3_attn_res_hardcoded",
                        {testing::source_path("cases/guard.json"), "--filter", "seed*", "--profile", "vllm-op"}),
                     kExitUnmet);
  const json& c = r["cases"][0];
  EXPECT_EQ(c["disposition"], "not-rejected");
  EXPECT_GT(c["comparison"]["max_abs_error"].get<double>(), 3.0);
  EXPECT_EQ(c["violations"][0]["tensor"], "prefix");
}

TEST_F(TorchBridge, AFullSchemaReturningItsOutputRunsEveryPublicCase) {
  const json r = run(op("attn_res_full", {testing::source_path("cases/public.json")}), kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 36);
}

TEST_F(TorchBridge, AnOpThatIsNotRegisteredIsNotRun) {
  const json r = run(op("no_such_op", {testing::source_path("cases/guard.json")}), kExitUnmet);
  EXPECT_EQ(r["summary"]["by_disposition"]["not-run"], 5);
  EXPECT_NE(r["cases"][0]["detail"].get<std::string>().find(
                "torch op attnres_test::no_such_op is not registered after loading"),
            std::string::npos);
  const json vllm =
      run({"run", testing::source_path("cases/guard.json"), "--kernel", "torch-op:_C::kimi_k3_attn_res"}, kExitUnmet);
  EXPECT_NE(vllm["cases"][0]["detail"].get<std::string>().find("is not registered (no --torch-library given)"),
            std::string::npos);
}

TEST_F(TorchBridge, ALibraryThatDoesNotLoadIsAUsageError) {
  try {
    run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel",
             "torch-op:attnres_test::x", "--torch-library", "/nonexistent/_C.abi3.so"});
    ADD_FAILURE() << "no usage error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load the torch library: /nonexistent/_C.abi3.so"), std::string::npos)
        << e.what();
  }
}

class PythonBridge : public Bridges {
 protected:
  void SetUp() override {
    Bridges::SetUp();
    if (IsSkipped()) return;
    if (!ATTNRES_HAVE_PYTHON_BRIDGE)
      GTEST_SKIP() << "CMake found no Python development files: the Python bridge is not built";
  }
  static std::string function(const std::string& name) { return "python:attnres_python_test:" + name; }
};

TEST_F(PythonBridge, TheEagerKernelMeetsTheBundledExpectations) {
  const json r = run({"run", testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"),
                      "--kernel", function("attn_res_eager"), "--profile", "vllm-op"},
                     kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 36 + 1);
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 3);
  const json& seed = find(r, "seed-repro-prefix-stride-7175");
  EXPECT_EQ(seed["rejection"], kSeedMessage);
  EXPECT_NE(seed["detail"].get<std::string>().find("(raised as RuntimeError)"), std::string::npos);
  EXPECT_NE(seed["kernel_context"].get<std::string>().find("Traceback (most recent call last)"), std::string::npos);
  // The vllm signature returns a fresh output: the padded output of this case is not the kernel's to see.
  EXPECT_EQ(find(r, "guard-output-stride")["disposition"], "skipped");
}

// vLLM's dispatch routes padded rows to its Triton kernel, which computes them: with the
// vllm-dispatch preset a kernel that takes every stride is green on every bundled case, and the
// fixed op's refusals are failures.
TEST_F(PythonBridge, TheDispatchPresetGatesAKernelThatTakesEveryStride) {
  // The padded and viewed layouts; torch eager on the host makes the largest bundled cases slow.
  const json r = run({"run", testing::source_path("cases/guard.json"), testing::source_path("cases/layouts.json"),
                      testing::source_path("cases/portable-padded.json"),
                      testing::source_path("cases/flashinfer/row-padded-64.json"), testing::source_path("cases/vllm"),
                      "--kernel", function("attn_res_eager_any_stride"), "--profile", "vllm-dispatch"},
                     kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["rejected-as-expected"], 0);
  EXPECT_GT(r["summary"]["by_disposition"]["skipped"], 0);  // padded outputs: the signature returns a fresh one
  EXPECT_EQ(find(r, "seed-repro-prefix-stride-7175")["disposition"], "passed");
  EXPECT_NE(
      find(r, "seed-repro-prefix-stride-7175")["expectation"].get<std::string>().find("compute: preset vllm-dispatch"),
      std::string::npos);
  const json op = run({"run", testing::source_path("cases/guard.json"), "--kernel", function("attn_res_eager"),
                       "--profile", "vllm-dispatch"},
                      kExitUnmet);
  EXPECT_EQ(op["summary"]["by_disposition"]["unexpected-rejection"], 3);
}

// explore spends its budget on what vLLM's signature can be asked: a drawn padded output (a fresh
// output cannot have one) is drawn again, and the summary names the reason.
TEST_F(PythonBridge, ExploreJudgesOrExplainsEveryTrial) {
  const CommandOutput out =
      run_cli({"explore", "--backend", "cpu", "--kernel", function("attn_res_eager_any_stride"), "--profile",
               "vllm-dispatch", "--budget", "30", "--seed", "3", "--max-hidden", "256", "--max-tokens", "8"});
  EXPECT_EQ(out.exit_code, kExitOk) << out.text << out.notes;
  EXPECT_NE(out.text.find("30 trials, nothing went wrong: 30 passed"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("skipped"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("the function returns a fresh output"), std::string::npos) << out.text;
}

TEST_F(PythonBridge, FlashInfersSignatureSeesTheCallersOutput) {
  const json r = run({"run", testing::source_path("cases/guard.json"), "--kernel", function("attn_res_flashinfer"),
                      "--signature", "flashinfer", "--profile", "flashinfer"},
                     kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 5);
  EXPECT_EQ(find(r, "guard-output-stride")["comparison"]["mismatched"], 0);  // written at the caller's padded rows
}

TEST_F(PythonBridge, TheSeedBugIsCaughtThroughPython) {
  const json r = run({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--kernel",
                      function("attn_res_eager_hardcoded"), "--profile", "vllm-op"},
                     kExitUnmet);
  EXPECT_EQ(r["cases"][0]["disposition"], "not-rejected");
  EXPECT_GT(r["cases"][0]["comparison"]["max_abs_error"].get<double>(), 3.0);
  // Declared as a dispatch that computes every layout, the same bug is a wrong answer.
  const json dispatch = run({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--kernel",
                             function("attn_res_eager_hardcoded"), "--profile", "vllm-dispatch"},
                            kExitUnmet);
  EXPECT_NE(dispatch["cases"][0]["disposition"], "passed");
  EXPECT_GT(dispatch["cases"][0]["comparison"]["mismatched"].get<std::int64_t>(), 1000000);
}

TEST_F(PythonBridge, AResultThatIsNotTheOutputFails) {
  const json r = run({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b1-norm", "--kernel",
                      function("attn_res_wrong_dtype")},
                     kExitUnmet);
  EXPECT_EQ(r["cases"][0]["disposition"], "failed");
  EXPECT_NE(r["cases"][0]["detail"].get<std::string>().find("returned a torch.float32 tensor of shape [3, 7168]"),
            std::string::npos)
      << r["cases"][0]["detail"];
}

TEST_F(PythonBridge, AnImportErrorInsideTheKernelIsAnErrorWithItsType) {
  const json r = run({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b1-norm", "--kernel",
                      function("attn_res_import_vllm")},
                     kExitUnmet);
  EXPECT_EQ(r["cases"][0]["disposition"], "error");
  EXPECT_EQ(r["cases"][0]["detail"], "ModuleNotFoundError: No module named 'vllm'");
  EXPECT_NE(r["cases"][0]["kernel_context"].get<std::string>().find("attn_res_import_vllm"), std::string::npos);
}

TEST_F(PythonBridge, AMessageWithANulOrALoneSurrogateIsKeptWhole) {
  const json r = run({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b1-norm", "--kernel",
                      function("attn_res_unprintable_error")},
                     kExitUnmet);
  // A RuntimeError is a refusal: its message is the one compared with an expected rejection.
  EXPECT_EQ(r["cases"][0]["rejection"], "a NUL \\x00 here, a lone surrogate \\ud800 there");
}

TEST_F(PythonBridge, AModuleOrFunctionThatIsNotThereIsAUsageError) {
  for (const auto& [kernel, message] :
       {std::pair<std::string, std::string>{"python:no_such_module:f", "cannot import no_such_module"},
        {function("no_such_function"), "attnres_python_test has no no_such_function"}}) {
    try {
      run_cli({"run", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel", kernel});
      ADD_FAILURE() << "no usage error for " << kernel;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST_F(PythonBridge, ReproBundlesAndInfoFollowTheBridgedKernel) {
  const auto bundle = dir_.path() / "bundle";
  const std::string kernel = function("attn_res_flashinfer");
  const CommandOutput repro =
      run_cli({"repro", testing::source_path("cases/guard.json"), "--case", "guard-output-stride", "--out",
               bundle.string(), "--backend", "cpu", "--kernel", kernel, "--signature", "flashinfer"});
  EXPECT_EQ(repro.exit_code, kExitOk) << repro.text << repro.notes;
  EXPECT_NE(read_file(bundle / "replay.sh").find("--kernel " + kernel + " --signature flashinfer"), std::string::npos)
      << read_file(bundle / "replay.sh");
  const json environment = json::parse(read_file(bundle / "environment.json"));
  EXPECT_EQ(environment["kernel"], kernel);
  EXPECT_EQ(environment["signature"], "flashinfer");
  // info says, case by case, what a signature that returns its output cannot express.
  const CommandOutput info = run_cli(
      {"info", testing::source_path("cases/guard.json"), "--backend", "cpu", "--kernel", function("attn_res_eager")});
  EXPECT_NE(info.text.find("the function returns a fresh output"), std::string::npos) << info.text;
}

// A third-party entry point with the contract's operands under other names, in another order and
// with defaults is gated as it is: the aliases bind it, and so does --arg.
TEST_F(PythonBridge, AThirdPartySignatureIsBoundByName) {
  const std::vector<std::string> cases = {testing::source_path("cases/guard.json"),
                                          testing::source_path("cases/layouts.json"), "--profile", "vllm-dispatch"};
  for (const std::vector<std::string>& binding :
       {std::vector<std::string>{},
        {"--arg", "prefix=prefix_sum", "--arg", "blocks=block_residual", "--arg", "qk_weight=projection_weight"}}) {
    std::vector<std::string> args = {"run", "--kernel", function("kimi_k3_attn_res")};
    args.insert(args.end(), cases.begin(), cases.end());
    args.insert(args.end(), binding.begin(), binding.end());
    const json r = run(args, kExitOk);
    EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 10);
    EXPECT_EQ(r["summary"]["by_disposition"]["skipped"], 2);
    EXPECT_EQ(find(r, "seed-repro-prefix-stride-7175")["disposition"], "passed");
    // It returns its output: a padded output cannot be handed to it.
    EXPECT_EQ(find(r, "guard-output-stride")["disposition"], "skipped");
  }
  // The same signature with the seed bug is caught.
  const json bug = run({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--kernel",
                        function("kimi_k3_attn_res_hardcoded"), "--profile", "vllm-dispatch"},
                       kExitUnmet);
  EXPECT_GT(bug["cases"][0]["comparison"]["mismatched"].get<std::int64_t>(), 1000000);
}

// Names no alias knows, positional-only and keyword-only parameters and a caller-owned output
// named y: bound by --arg alone, every layout computed, the padded output written in place.
TEST_F(PythonBridge, ArgNamesEveryParameterOfAnUnfamiliarSignature) {
  const json r = run({"run",       testing::source_path("cases/guard.json"),
                      "--kernel",  function("fused_depth_mix"),
                      "--profile", "flashinfer",
                      "--arg",     "prefix=x",
                      "--arg",     "blocks=stack",
                      "--arg",     "norm_weight=gamma",
                      "--arg",     "qk_weight=w",
                      "--arg",     "eps=epsilon",
                      "--arg",     "delta=dx",
                      "--arg",     "num_blocks=n_used",
                      "--arg",     "block_write_idx=slot",
                      "--arg",     "output_norm_weight=gamma_out",
                      "--arg",     "output_norm_eps=epsilon_out",
                      "--arg",     "output=y"},
                     kExitOk);
  EXPECT_EQ(r["summary"]["by_disposition"]["passed"], 5);
  EXPECT_EQ(find(r, "guard-output-stride")["comparison"]["mismatched"], 0);
}

// What a signature has no parameter for is said case by case: cases with delta, an output norm or
// a block write are skipped with the reason, the others judged.
TEST_F(PythonBridge, CasesASignatureCannotTakeAreSkippedWithTheParameterItLacks) {
  const json r = run({"run", testing::source_path("cases/public.json"), "--kernel", function("attn_res_without_delta"),
                      "--profile", "vllm-dispatch"},
                     kExitOk);
  EXPECT_GT(r["summary"]["by_disposition"]["passed"], 0);
  EXPECT_GT(r["summary"]["by_disposition"]["skipped"], 0);
  for (const json& c : r["cases"]) {
    if (c["disposition"] != "skipped") continue;
    const std::string detail = c["detail"];
    EXPECT_TRUE(detail.find("the function has no parameter for") != std::string::npos ||
                detail.find("returns a fresh output") != std::string::npos)
        << c["name"] << ": " << detail;
  }
}

// A parameter that cannot be bound is a usage error (exit 2) that names it.
// run --check through the Python bridge: torch eager on the host has every property; a large-batch
// path that rounds differently and a batch-wide reduction each fail theirs, and only theirs.
TEST_F(PythonBridge, PropertiesAreJudgedThroughPython) {
  for (const auto& [name, lacked] : {std::pair<std::string, std::string>{"attn_res_eager_any_stride", ""},
                                     {"attn_res_batch_dependent", "batch-invariance"},
                                     {"attn_res_leaks_garbage", "garbage"}}) {
    const json r = run({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b2-delta-norm",
                        "--kernel", function(name), "--check", "all"},
                       lacked.empty() ? kExitOk : kExitUnmet);
    ASSERT_EQ(r["cases"].size(), 1u);
    ASSERT_EQ(r["cases"][0]["properties"].size(), 6u);
    for (const json& p : r["cases"][0]["properties"]) {  // no streams, graphs or PDL on the host
      const bool on_device = p["check"] == "stream" || p["check"] == "graph" || p["check"] == "pdl";
      EXPECT_EQ(p["disposition"], p["check"] == lacked ? "failed"
                                  : on_device          ? "skipped"
                                                       : "passed")
          << name << " " << p["detail"];
    }
  }
}

TEST_F(PythonBridge, AParameterThatCannotBeBoundIsAUsageErrorNamingIt) {
  const std::string guard = testing::source_path("cases/guard.json");
  const std::string mix = function("fused_depth_mix");
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--kernel", mix}, "parameter 'x' binds to no operand of the AttnRes contract"},
           {{"--kernel", mix, "--arg", "prefix=nope"}, "--arg prefix=nope: the function has no parameter 'nope'"},
           {{"--kernel", mix, "--arg", "bogus=x"}, "bogus is not part of the AttnRes contract"},
           {{"--kernel", mix, "--arg", "prefix"}, "--arg: expected CONTRACT=PARAMETER"},
           {{"--kernel", mix, "--arg", "prefix=x;eps=w"}, "--arg: expected CONTRACT=PARAMETER"},
           {{"--kernel", function("attn_res_eager"), "--signature", "vllm", "--arg", "prefix=prefix"},
            "--arg binds parameters by name: it goes with --signature auto, not vllm"},
           {{"--kernel", "native", "--arg", "prefix=x"}, "--arg goes with --kernel python:MODULE:FUNCTION"},
           {{"--kernel", "native", "--signature", "flashinfer"},
            "--signature goes with --kernel python:MODULE:FUNCTION"},
       }) {
    std::vector<std::string> command = {"run", guard, "--backend", "cpu"};
    command.insert(command.end(), args.begin(), args.end());
    try {
      run_cli(command);
      ADD_FAILURE() << "no usage error for " << args[1];
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// On the GPU (ctest label gpu).

TEST_F(Gpu, TorchOpBridgeOnDeviceTensors) {
  if (!ATTNRES_HAVE_TORCH_BRIDGE) GTEST_SKIP() << "CMake found no Torch: the torch-op bridge is not built";
  const BinaryRun vllm = run_binary(
      {"run", testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"), "--kernel",
       "torch-op:attnres_test::kimi_k3_attn_res", "--torch-library", ATTNRES_TORCH_TEST_OPS, "--profile", "vllm-op"});
  EXPECT_EQ(vllm.exit_code, kExitOk) << vllm.output;
  EXPECT_EQ(vllm.report["summary"]["by_disposition"]["passed"], 6);
  EXPECT_EQ(vllm.report["summary"]["by_disposition"]["rejected-as-expected"], 3);
  EXPECT_EQ(find_case(vllm.report, "seed-repro-prefix-stride-7175")["rejection"],
            "Kimi K3 AttnRes requires densely packed rows; got strides 7175, 7168, 7168 for hidden_size 7168");
  const BinaryRun full =
      run_binary({"run", testing::source_path("cases/public.json"), "--kernel", "torch-op:attnres_test::attn_res_full",
                  "--torch-library", ATTNRES_TORCH_TEST_OPS});
  EXPECT_EQ(full.exit_code, kExitOk) << full.output;
  EXPECT_EQ(full.report["summary"]["by_disposition"]["passed"], 36);
  // The op on the stream it is given: behind late inputs it waits for them, captured around it
  // replays what it computes eagerly.
  const BinaryRun streamed = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                         "--kernel", "torch-op:attnres_test::attn_res_full", "--torch-library",
                                         ATTNRES_TORCH_TEST_OPS, "--check", "stream,graph,pdl"});
  EXPECT_EQ(streamed.exit_code, kExitOk) << streamed.output;
  for (const auto& c : streamed.report["cases"])
    for (const auto& p : c["properties"]) EXPECT_EQ(p["disposition"], "passed") << c["name"] << p;
  const BinaryRun seed = run_binary({"run", testing::source_path("cases/guard.json"), "--filter", "seed*", "--kernel",
                                     "torch-op:attnres_test::kimi_k3_attn_res_hardcoded", "--torch-library",
                                     ATTNRES_TORCH_TEST_OPS, "--profile", "vllm-op"});
  EXPECT_EQ(seed.report["cases"][0]["disposition"], "not-rejected") << seed.output;
}

TEST_F(Gpu, PythonBridgeOnDeviceTensors) {
  if (!ATTNRES_HAVE_PYTHON_BRIDGE)
    GTEST_SKIP() << "CMake found no Python development files: the Python bridge is not built";
  for (const char* function : {"attn_res_eager", "attn_res_triton"}) {
    const BinaryRun run =
        run_binary({"run", testing::source_path("cases/public.json"), testing::source_path("cases/guard.json"),
                    "--kernel", std::string("python:attnres_python_test:") + function, "--profile", "vllm-op"});
    EXPECT_EQ(run.exit_code, kExitOk) << function << run.output;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["passed"], 37) << function;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["rejected-as-expected"], 3) << function;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["skipped"], 1) << function;  // a padded output
  }
  // Kernels that take every stride, gated as vLLM's dispatch and FlashInfer's API: every bundled
  // case computed (or skipped where the signature returns a fresh output).
  for (const auto& [function, preset] :
       {std::pair<std::string, std::string>{"attn_res_triton_any_stride", "vllm-dispatch"},
        {"attn_res_eager_any_stride", "vllm-dispatch"},
        {"attn_res_flashinfer", "flashinfer"},
        {"attn_res_triton_peer", "flashinfer"},
        {"attn_res_triton_peer_pdl", "flashinfer"}}) {
    std::vector<std::string> args{"run",       testing::source_path("cases"),
                                  "--kernel",  "python:attnres_python_test:" + function,
                                  "--profile", preset};
    if (preset == "flashinfer") args.insert(args.end(), {"--signature", "flashinfer"});
    const BinaryRun run = run_binary(args);
    EXPECT_EQ(run.exit_code, kExitOk) << function << run.output;
    EXPECT_EQ(run.report["summary"]["by_disposition"]["rejected-as-expected"], 0) << function;
  }
  // A Triton kernel on the stream the bridge makes current: behind late inputs it waits for them;
  // under torch.cuda.graph it replays what it computes eagerly; launched with PDL, it reads
  // nothing before the previous kernel has finished. torch eager too; a check that reads the
  // weights on the host cannot be captured, and fails the graph check only.
  struct Checked {
    std::string function, signature, lacked;
  };
  for (const auto& [function, signature, lacked] :
       {Checked{"attn_res_triton", "auto", ""}, Checked{"attn_res_triton_peer_pdl", "flashinfer", ""},
        Checked{"attn_res_eager_any_stride", "auto", ""}, Checked{"attn_res_checks_on_host", "auto", "graph"}}) {
    const BinaryRun checked = run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*",
                                          "--kernel", "python:attnres_python_test:" + function, "--signature",
                                          signature, "--check", "stream,graph,pdl,determinism"});
    EXPECT_EQ(checked.exit_code, lacked.empty() ? kExitOk : kExitUnmet) << function << checked.output;
    for (const auto& c : checked.report["cases"])
      for (const auto& p : c["properties"])
        EXPECT_EQ(p["disposition"], p["check"] == lacked ? "failed" : "passed") << function << c["name"] << p;
    if (!lacked.empty())
      EXPECT_NE(checked.report["cases"][0]["detail"].get<std::string>().find(
                    "graph: the call cannot be captured in a CUDA graph: "),
                std::string::npos)
          << checked.report["cases"][0]["detail"];
  }
  // A replay whose output is right but that never writes p back fails the graph check on every case
  // with a delta or a block write (elsewhere p is prefix, and nothing is left to write).
  const BinaryRun residual =
      run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t17-*", "--kernel",
                  "python:attnres_python_test:attn_res_keeps_residual_out_of_graphs", "--check", "graph"});
  EXPECT_EQ(residual.exit_code, kExitUnmet) << residual.output;
  for (const auto& c : residual.report["cases"]) {
    const std::string name = c["name"];
    const bool writes = name.find("delta") != std::string::npos || name.find("write") != std::string::npos;
    const std::string detail = c["properties"][0]["detail"];
    EXPECT_EQ(c["properties"][0]["disposition"], writes ? "failed" : "passed") << name << detail;
    if (writes)
      EXPECT_EQ(detail.rfind("replay 1, on the case's inputs, does not meet the float64 reference: ", 0), 0u) << detail;
  }
  // The seed's dispatch without the op-existence check, on a torch without vLLM's op.
  const BinaryRun missing =
      run_binary({"run", testing::source_path("cases/public.json"), "--filter", "public-t3-b1-norm", "--kernel",
                  "python:attnres_python_test:attn_res_without_op_check"});
  EXPECT_EQ(missing.report["cases"][0]["disposition"], "error") << missing.output;
  EXPECT_NE(missing.report["cases"][0]["detail"].get<std::string>().find("AttributeError"), std::string::npos)
      << missing.report["cases"][0]["detail"];
}

}  // namespace
}  // namespace attnres
