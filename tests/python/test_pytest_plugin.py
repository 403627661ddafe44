"""Tests of the pytest plugin (python/attnres_check/pytest_plugin.py), run as a pytest user runs it:
`python3 -m pytest -p attnres_check.pytest_plugin ...` in an empty directory, on the CPU backend,
with the in-tree Python test kernels. Outcomes are read from pytest's own --junitxml.

Usage: test_pytest_plugin.py ATTNRES_CHECK SOURCE_DIR HAVE_PYTHON_BRIDGE(0|1) [all]
  all: also the bundled cases but the three largest (minutes of torch eager on the CPU)
Exits 77 (skipped) without pytest, torch or the Python bridge.
"""
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree

BINARY, SOURCE = os.path.abspath(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
ALL = sys.argv[4:] == ["all"]
if sys.argv[3] != "1" or not all(importlib.util.find_spec(m) for m in ("pytest", "torch")):
    print("skipped: needs pytest, torch and the Python bridge")
    sys.exit(77)
CASES = SOURCE / "cases"
KERNEL = "python:attnres_python_test:"
ARGS = ["-p", "attnres_check.pytest_plugin", "--attnres-backend", "cpu", "--attnres-binary", BINARY]


class Run:
    """One pytest run: its exit status, output and the outcome of each test by name."""

    def __init__(self, work, *arguments):
        junit = pathlib.Path(work) / "junit.xml"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SOURCE / "python"), str(SOURCE / "tests" / "plugins")]))
        ran = subprocess.run([sys.executable, "-m", "pytest", *ARGS, *arguments, "--junitxml", str(junit), "-q"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=1800)
        self.status, self.output = ran.returncode, ran.stdout + ran.stderr
        self.outcomes, self.texts = {}, {}
        if junit.exists():
            for case in ElementTree.parse(junit).iter("testcase"):
                outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
                self.outcomes[case.get("name")] = "passed" if outcome is None else outcome.tag
                if outcome is not None:
                    self.texts[case.get("name")] = outcome.get("message", "") + (outcome.text or "")

    def count(self, outcome):
        return sum(1 for o in self.outcomes.values() if o == outcome)


class PytestPlugin(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.addCleanup(self.work.cleanup)

    def run_pytest(self, *arguments):
        return Run(self.work.name, *arguments)

    def test_the_fixed_kernel_passes_the_guard_and_layout_cases(self):
        run = self.run_pytest("--attnres-cases", str(CASES / "guard.json"), "--attnres-cases", str(CASES / "layouts.json"),
                              "--attnres-kernel", KERNEL + "attn_res_eager", "--attnres-profile", "vllm-op")
        self.assertEqual(run.status, 0, run.output)
        # One item per case; what its signature cannot express (a padded output) is a pytest skip.
        self.assertEqual(len(run.outcomes), 12, run.output)
        self.assertEqual(run.outcomes["seed-repro-prefix-stride-7175"], "passed")
        self.assertEqual(run.outcomes["guard-output-stride"], "skipped")
        self.assertIn("the function returns a fresh output", run.texts["guard-output-stride"])

    def test_the_seed_bug_fails_with_the_tools_explanation_and_its_bundle(self):
        repro = pathlib.Path(self.work.name) / "repro"
        run = self.run_pytest("--attnres-cases", str(CASES / "guard.json"), "--attnres-kernel",
                              KERNEL + "attn_res_eager_hardcoded", "--attnres-profile", "vllm-dispatch",
                              "--attnres-repro-dir", str(repro), "-k", "seed")
        self.assertEqual(run.status, 1, run.output)
        self.assertEqual(run.outcomes, {"seed-repro-prefix-stride-7175": "failure"}, run.output)  # -k selected it alone
        for text in ("seed-repro-prefix-stride-7175 (", "max-abs error 5.616 at [155, 1080]",
                     "Mismatched elements: 1686395 / 2293760 (73.5%)",
                     "prefix: padding canary overwritten at row 0 col 7168 (2204 elements)", "repro bundle: "):
            self.assertIn(text, run.output)
        (bundle,) = [p for p in repro.rglob("case.json")]
        self.assertIn(f"repro bundle: {bundle.parent}", run.output)
        # --lf runs again only what failed.
        again = self.run_pytest("--attnres-cases", str(CASES / "guard.json"), "--attnres-kernel",
                                KERNEL + "attn_res_eager_hardcoded", "--attnres-profile", "vllm-dispatch", "--lf")
        self.assertEqual(list(again.outcomes), ["seed-repro-prefix-stride-7175"], again.output)

    def test_a_third_party_signature_is_gated_with_attnres_arg_alone(self):
        run = self.run_pytest("--attnres-cases", str(CASES / "guard.json"), "--attnres-kernel",
                              KERNEL + "fused_depth_mix", "--attnres-profile", "flashinfer",
                              *[w for pair in ("prefix=x", "blocks=stack", "norm_weight=gamma", "qk_weight=w",
                                               "eps=epsilon", "delta=dx", "num_blocks=n_used", "block_write_idx=slot",
                                               "output_norm_weight=gamma_out", "output_norm_eps=epsilon_out",
                                               "output=y") for w in ("--attnres-arg", pair)])
        self.assertEqual(run.status, 0, run.output)
        self.assertEqual(run.count("passed"), 5, run.output)

    def test_a_parameter_that_cannot_be_bound_stops_the_session_naming_it(self):
        run = self.run_pytest("--attnres-cases", str(CASES / "guard.json"), "--attnres-kernel", KERNEL + "fused_depth_mix")
        self.assertEqual(run.status, 4, run.output)  # pytest's usage error
        self.assertIn("parameter 'x' binds to no operand of the AttnRes contract", run.output)

    def test_without_cases_it_adds_nothing(self):
        run = self.run_pytest()
        self.assertEqual(run.status, 5, run.output)  # no tests collected
        self.assertEqual(run.outcomes, {})

    @unittest.skipUnless(ALL, "the bundled cases take minutes on the CPU: run with `all`")
    def test_the_bundled_cases_pass_on_the_fixed_kernel(self):
        run = self.run_pytest("--attnres-cases", str(CASES), "--attnres-kernel", KERNEL + "attn_res_eager",
                              "--attnres-profile", "vllm-op", "-k", "not m16384 and not m4096 and not large")
        self.assertEqual(run.status, 0, run.output)
        self.assertGreater(run.count("passed"), 100)
        self.assertEqual(run.count("failure") + run.count("error"), 0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
