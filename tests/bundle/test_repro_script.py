"""Tests of the repro.py a bundle holds, run as the person handed the bundle runs it: with torch
and nothing else (no safetensors package, no GPU). Its float64 PyTorch verdict must agree with
the tool's own, and the bundle's own Python kernel must be called again where it ran (the CPU).

Usage: test_repro_script.py ATTNRES_CHECK SOURCE_DIR HAVE_PYTHON_BRIDGE(0|1)
       [TORCH_TEST_OPS_LIBRARY TORCH_TEST_OPS_STATIC_RUNTIME_LIBRARY]
Exit 77 (skipped) where torch is not importable.
"""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

BINARY, SOURCE = os.path.abspath(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
HAVE_PYTHON_BRIDGE = sys.argv[3] == "1"
TORCH_TEST_OPS = sys.argv[4] if len(sys.argv) > 4 else ""  # empty where the torch bridge is not built
# The same ops linked with a static C++ runtime (libstdc++.a), as some toolchains link them.
TORCH_TEST_OPS_STATIC_RUNTIME = sys.argv[5] if len(sys.argv) > 5 else ""
# A GPU for repro.py and for the tool's CUDA backend (the device image; never CI).
CUDA = importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available()
MESSAGE = "Kimi K3 AttnRes requires densely packed rows; got strides 71, 64, 64 for hidden_size 64"


def bundle(out, *arguments, backend="cpu"):
    """Writes a repro bundle (with the CPU backend unless told); returns its result.json."""
    env = dict(os.environ, PYTHONPATH=str(SOURCE / "tests" / "plugins"))
    made = subprocess.run([BINARY, "repro", *arguments, "--backend", backend, "--out", str(out)], env=env,
                          capture_output=True, text=True)
    if not (out / "result.json").exists():
        raise AssertionError(f"no bundle written (exit {made.returncode}):\n{made.stdout}{made.stderr}")
    return json.loads((out / "result.json").read_text())


def repro_py(directory, *arguments, gpu=False):
    """Runs the bundle's repro.py with a Python that cannot import safetensors (and sees no GPU
    unless told)."""
    blocker = directory / "no-safetensors"
    blocker.mkdir(exist_ok=True)
    (blocker / "safetensors.py").write_text("raise ImportError('repro.py must not need safetensors')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), str(SOURCE / "tests" / "plugins")]))
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, "repro.py", *arguments], cwd=directory, env=env, capture_output=True,
                          text=True)


def exit_and_stderr(ran):
    """What a failing check shows besides stdout: how repro.py ended (negative: killed by that signal)."""
    return f"repro.py exit {ran.returncode}; stderr:\n{ran.stderr}"


def contract_line(spec, prefix_exact=True, outside="none"):
    """repro.py's line on the rest of the contract for `spec`, with the blocks exact and no input changed."""
    return (f"{spec}: prefix bit-exact: {prefix_exact}; blocks bit-exact: True; inputs it changed: none; "
            f"elements changed outside the views: {outside}")


def verdict_line(stdout, label):
    """(max-abs, mismatched, total) from repro.py's line for `label`."""
    match = re.search(re.escape(label) + r": max-abs error (\S+) at .*Mismatched elements: (\d+) / (\d+)", stdout)
    if not match:
        raise AssertionError(f"no verdict for {label!r} in:\n{stdout}")
    return float(match.group(1)), int(match.group(2)), int(match.group(3))


def padded_prefix_case(work, block_write_idx=-1):
    """A small case whose prefix rows are 71 apart (H=64): the seed bug's layout."""
    case = {"schema_version": 1, "name": "padded-prefix", "T": 3, "H": 64, "max_blocks": 3, "num_blocks": 2,
            "block_write_idx": block_write_idx, "has_delta": True, "has_output_norm": True, "eps": 1e-5,
            "output_norm_eps": 1e-5, "dtype": "bf16", "tensors": {"prefix": {"stride": [71, 1]}},
            "expect": {"verdict": "pass"}}
    path = pathlib.Path(work) / f"case{block_write_idx}.json"
    path.write_text(json.dumps(case))
    return path


class ReproScript(unittest.TestCase):
    def assert_refused_by_tool_and_repro_py(self, out, case_file, spec, *arguments):
        """Bundles `case_file` on kernel `spec`: the tool's report and repro.py's call each show the
        kernel refusing with the seed's whole message."""
        result = bundle(out, str(case_file), "--kernel", spec, *arguments)
        self.assertEqual(result["disposition"], "unexpected-rejection")
        self.assertIn(MESSAGE, (out / "REPORT.md").read_text())
        ran = repro_py(out)
        self.assertIn(f"{spec} raised RuntimeError: {MESSAGE}", ran.stdout, exit_and_stderr(ran))

    def assert_full_op_passes_in_tool_and_repro_py(self, work, backend="cpu"):
        """Bundles the padded-prefix case with a block write on attn_res_full (a Tensor? delta, a block
        write and a returned output, called by name): it passes, and repro.py, calling it again where
        it ran, agrees on every element and on the rest of the contract."""
        full = pathlib.Path(work) / "full"
        result = bundle(full, str(padded_prefix_case(work, block_write_idx=2)), "--kernel",
                        "torch-op:attnres_test::attn_res_full", "--torch-library", TORCH_TEST_OPS, backend=backend)
        self.assertEqual(result["disposition"], "passed")  # no guard, and it honours every stride
        ran = repro_py(full, gpu=backend == "cuda")
        self.assertEqual(ran.returncode, 0, ran.stdout + exit_and_stderr(ran))
        _, mismatched, total = verdict_line(ran.stdout, "torch-op:attnres_test::attn_res_full vs PyTorch float64")
        self.assertEqual((mismatched, total), (0, 192))
        self.assertIn(contract_line("torch-op:attnres_test::attn_res_full"), ran.stdout, exit_and_stderr(ran))

    def test_the_unguarded_seed_repro_is_judged_as_the_tool_judged_it(self):
        with tempfile.TemporaryDirectory() as work:
            out = pathlib.Path(work) / "bundle"
            result = bundle(out, str(SOURCE / "cases" / "guard.json"), "--case", "seed-repro-prefix-stride-7175",
                            "--no-layout-guard")
            self.assertEqual(result["disposition"], "not-rejected")
            ran = repro_py(out)
            self.assertEqual(ran.returncode, 1, ran.stdout + ran.stderr)
            max_abs, mismatched, total = verdict_line(ran.stdout, "captured kernel output vs PyTorch float64")
            comparison = result["comparison"]
            self.assertGreater(max_abs, 3.0)
            self.assertAlmostEqual(max_abs, comparison["max_abs_error"], places=4)
            self.assertEqual((mismatched, total), (comparison["mismatched"], comparison["total"]))
            self.assertIn("prefix: shape [320, 7168] stride [7175, 1]", ran.stdout, exit_and_stderr(ran))
            self.assertIn("prefix bit-exact: False; blocks bit-exact: True", ran.stdout, exit_and_stderr(ran))

    def test_a_passing_case_passes(self):
        with tempfile.TemporaryDirectory() as work:
            out = pathlib.Path(work) / "bundle"
            result = bundle(out, str(SOURCE / "cases" / "layouts.json"), "--case", "view-prefix-flat-offset-1")
            self.assertEqual(result["disposition"], "passed")
            ran = repro_py(out)
            self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
            _, mismatched, total = verdict_line(ran.stdout, "captured kernel output vs PyTorch float64")
            self.assertEqual((mismatched, total), (0, result["comparison"]["total"]))
            self.assertIn("prefix bit-exact: True; blocks bit-exact: True", ran.stdout, exit_and_stderr(ran))

    @unittest.skipUnless(HAVE_PYTHON_BRIDGE, "the Python bridge is not built")
    def test_the_bundles_own_python_kernel_is_called_again_on_the_cpu(self):
        with tempfile.TemporaryDirectory() as work:
            case_file = padded_prefix_case(work)
            hardcoded = pathlib.Path(work) / "hardcoded"
            result = bundle(hardcoded, str(case_file), "--kernel", "python:attnres_python_test:attn_res_eager_hardcoded")
            self.assertEqual(result["disposition"], "memory-violation")  # it writes p into the prefix padding
            ran = repro_py(hardcoded)
            self.assertEqual(ran.returncode, 1, ran.stdout + ran.stderr)
            label = "python:attnres_python_test:attn_res_eager_hardcoded vs PyTorch float64"
            _, mismatched, _ = verdict_line(ran.stdout, label)
            self.assertGreater(mismatched, 0)
            self.assertEqual(mismatched, result["comparison"]["mismatched"])
            # The prefix padding the tool found overwritten, found again by torch alone.
            [padding] = [v for v in result["violations"] if v["kind"] == "padding canary overwritten"]
            self.assertEqual(padding["tensor"], "prefix")
            self.assertIn(contract_line("python:attnres_python_test:attn_res_eager_hardcoded", False,
                                        f"prefix {padding['count']}"), ran.stdout, exit_and_stderr(ran))

            self.assert_refused_by_tool_and_repro_py(pathlib.Path(work) / "fixed", case_file,
                                                     "python:attnres_python_test:attn_res_eager")

    @unittest.skipUnless(HAVE_PYTHON_BRIDGE, "the Python bridge is not built")
    def test_the_bundles_own_python_kernel_is_called_with_the_runs_binding(self):
        """A signature bound by --arg alone (positional-only, keyword-only, a caller-owned y): the
        bundle records the binding, and repro.py calls the function again with it."""
        binding = ["prefix=x", "blocks=stack", "norm_weight=gamma", "qk_weight=w", "eps=epsilon", "delta=dx",
                   "num_blocks=n_used", "block_write_idx=slot", "output_norm_weight=gamma_out",
                   "output_norm_eps=epsilon_out", "output=y"]
        spec = "python:attnres_python_test:fused_depth_mix"
        with tempfile.TemporaryDirectory() as work:
            out = pathlib.Path(work) / "bundle"
            arguments = [word for pair in binding for word in ("--arg", pair)]
            result = bundle(out, str(padded_prefix_case(work, block_write_idx=2)), "--kernel", spec, *arguments)
            self.assertEqual(result["disposition"], "passed")
            self.assertEqual(json.loads((out / "environment.json").read_text())["arguments"], binding)
            ran = repro_py(out)
            self.assertEqual(ran.returncode, 0, ran.stdout + exit_and_stderr(ran))
            _, mismatched, total = verdict_line(ran.stdout, f"{spec} vs PyTorch float64")
            self.assertEqual((mismatched, total), (0, 192))
            self.assertIn(contract_line(spec), ran.stdout, exit_and_stderr(ran))
            self.assertFalse((out / "__pycache__").exists())  # repro.py writes nothing into its bundle

    @unittest.skipUnless(HAVE_PYTHON_BRIDGE, "the Python bridge is not built")
    def test_a_kernel_that_kills_its_process_costs_only_its_own_line(self):
        with tempfile.TemporaryDirectory() as work:
            out = pathlib.Path(work) / "bundle"
            result = bundle(out, str(SOURCE / "cases" / "layouts.json"), "--case", "view-prefix-flat-offset-1",
                            "--kernel", "python:attnres_python_test:attn_res_kills_its_process")
            self.assertEqual(result["disposition"], "error")  # the tool's worker was killed
            ran = repro_py(out)
            self.assertEqual(ran.returncode, 1, ran.stdout + exit_and_stderr(ran))
            self.assertIn("python:attnres_python_test:attn_res_kills_its_process: the process calling it was killed by "
                          "signal 11 (SIGSEGV); its stderr is above", ran.stdout, exit_and_stderr(ran))
            self.assertIn("Fatal Python error: Segmentation fault", ran.stderr)  # faulthandler shows where

    @unittest.skipUnless(HAVE_PYTHON_BRIDGE, "the Python bridge is not built")
    def test_a_kernel_that_hangs_is_killed_after_the_timeout(self):
        with tempfile.TemporaryDirectory() as work:
            out = pathlib.Path(work) / "bundle"
            # The tool's timeout counts the worker's start, whose Python imports torch: seconds on a GPU
            # machine (2 s killed it there before the call).
            result = bundle(out, str(SOURCE / "cases" / "layouts.json"), "--case", "view-prefix-flat-offset-1",
                            "--kernel", "python:attnres_python_test:attn_res_hangs", "--timeout", "15")
            self.assertEqual(result["disposition"], "error")  # the tool's worker was killed at its timeout
            ran = repro_py(out, "--timeout", "15")  # each child imports torch too
            self.assertEqual(ran.returncode, 1, ran.stdout + exit_and_stderr(ran))
            self.assertIn("python:attnres_python_test:attn_res_hangs: still running after 15 s (--timeout); killed as a hang",
                          ran.stdout, exit_and_stderr(ran))

    @unittest.skipUnless(TORCH_TEST_OPS, "the torch bridge is not built")
    def test_the_bundles_own_torch_op_is_called_by_its_schemas_argument_names(self):
        with tempfile.TemporaryDirectory() as work:
            library = ["--torch-library", TORCH_TEST_OPS]
            self.assert_full_op_passes_in_tool_and_repro_py(work)

            # vLLM's schema has no block_write_idx: repro.py says so instead of calling it wrongly.
            vllm_schema = pathlib.Path(work) / "vllm-schema"
            bundle(vllm_schema, str(padded_prefix_case(work, block_write_idx=2)), "--kernel",
                   "torch-op:attnres_test::kimi_k3_attn_res", *library)
            ran = repro_py(vllm_schema)
            self.assertIn("torch-op:attnres_test::kimi_k3_attn_res: skipped (this case writes a block, and the op has "
                          "no block_write_idx)", ran.stdout, exit_and_stderr(ran))

            # Without the block write, the fixed op refuses the padded prefix with the seed's message.
            self.assert_refused_by_tool_and_repro_py(pathlib.Path(work) / "vllm-refuses", padded_prefix_case(work),
                                                     "torch-op:attnres_test::kimi_k3_attn_res", *library)

    @unittest.skipUnless(TORCH_TEST_OPS_STATIC_RUNTIME, "the torch bridge is not built")
    def test_an_op_library_with_its_own_static_cxx_runtime_refuses_with_the_whole_message(self):
        # Its libstdc++ copy, were it exported, would take part of torch's iostream calls: the message's
        # numbers went missing (torch 1.13) or formatting it crashed (torch 2.11, on the device image).
        with tempfile.TemporaryDirectory() as work:
            self.assert_refused_by_tool_and_repro_py(pathlib.Path(work) / "bundle", padded_prefix_case(work),
                                                     "torch-op:attnres_test::kimi_k3_attn_res", "--torch-library",
                                                     TORCH_TEST_OPS_STATIC_RUNTIME)

    @unittest.skipUnless(TORCH_TEST_OPS and CUDA, "needs the torch bridge and a CUDA device")
    def test_a_gpu_bundles_own_torch_op_is_called_again_on_the_gpu(self):
        with tempfile.TemporaryDirectory() as work:
            self.assert_full_op_passes_in_tool_and_repro_py(work, backend="cuda")
            hardcoded = pathlib.Path(work) / "hardcoded"
            result = bundle(hardcoded, str(padded_prefix_case(work)), "--kernel",
                            "torch-op:attnres_test::kimi_k3_attn_res_hardcoded", "--torch-library", TORCH_TEST_OPS,
                            backend="cuda")
            self.assertEqual(result["disposition"], "memory-violation")
            [padding] = [v for v in result["violations"] if v["kind"] == "padding canary overwritten"]
            ran = repro_py(hardcoded, gpu=True)
            self.assertEqual(ran.returncode, 1, ran.stdout + exit_and_stderr(ran))
            self.assertIn(contract_line("torch-op:attnres_test::kimi_k3_attn_res_hardcoded", False,
                                        f"prefix {padding['count']}"), ran.stdout, exit_and_stderr(ran))


if __name__ == "__main__":
    if importlib.util.find_spec("torch") is None:
        print("torch is not importable: skipped")
        sys.exit(77)
    unittest.main(argv=sys.argv[:1], verbosity=2)
