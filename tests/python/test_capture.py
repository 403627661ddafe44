"""Tests of python/attnres_check/capture.py without a GPU: the case-file writer and the dedupe logic on
plain objects that carry shape and strides; the files are read back by attnres-check itself; and,
where torch is importable, captured tensors replay bit for bit (checksums against the originals).

Usage: test_capture.py ATTNRES_CHECK SOURCE_DIR
"""
import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

BINARY, SOURCE = sys.argv[1], pathlib.Path(sys.argv[2])
sys.path.insert(0, str(SOURCE / "python"))
from attnres_check import binding  # noqa: E402
from attnres_check import capture as attnres_capture  # noqa: E402

MESSAGE = "Kimi K3 AttnRes requires densely packed rows; got strides {}, {}, {} for hidden_size {}"


class FakeTensor:
    """What the capture module reads of a tensor: shape, stride(), storage_offset(), dtype, device."""

    def __init__(self, shape, stride=None, offset=0, dtype="torch.bfloat16"):
        self.shape = tuple(shape)
        dense = []
        step = 1
        for n in reversed(shape):
            dense.insert(0, step)
            step *= n
        self._stride = tuple(stride or dense)
        self._offset = offset
        self.dtype = dtype
        self.device = "cpu"

    def stride(self):
        return self._stride

    def storage_offset(self):
        return self._offset


def fixed_kernel(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx, eps,
                 output_norm_eps):
    """Refuses rows that are not densely packed, as vLLM's fixed op does; returns a marker."""
    hidden = prefix.shape[1]
    delta_stride = None if delta is None else delta.stride()[0]
    if prefix.stride()[0] != hidden or delta_stride not in (None, hidden):
        raise RuntimeError(MESSAGE.format(prefix.stride()[0], "none" if delta is None else delta_stride, hidden, hidden))
    return ("output", prefix.shape)


def call(function, tokens=4, hidden=64, max_blocks=3, prefix_stride=None, delta=True, norm=True, num_blocks=2, write=2,
         blocks_stride=None, offset=0):
    prefix = FakeTensor((tokens, hidden), (prefix_stride or hidden, 1), offset)
    return function(prefix, FakeTensor((tokens, hidden)) if delta else None,
                    FakeTensor((tokens, max_blocks, hidden), blocks_stride), FakeTensor((hidden,)), FakeTensor((hidden,)),
                    FakeTensor((hidden,)) if norm else None, num_blocks, write, 1e-5, 1e-5)


def run_tool(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, check=False)


class CaptureWriter(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = pathlib.Path(self.dir.name)

    def tearDown(self):
        attnres_capture._captures.clear()  # no flush at exit into a removed directory
        self.dir.cleanup()

    def cases(self):
        return {p.name: json.loads(p.read_text()) for p in sorted(self.path.glob("*.json"))}

    def test_one_file_per_signature_with_its_count_and_layout(self):
        wrapped = attnres_capture.wrap(fixed_kernel, self.path, target="engine:attn_res")
        for _ in range(3):
            self.assertEqual(call(wrapped), ("output", (4, 64)))  # the result passes through
        call(wrapped, offset=8)                                     # another storage offset: another signature
        call(wrapped, blocks_stride=(64, 4 * 64, 1))                # block-major blocks: another
        wrapped.attnres_capture.flush()
        cases = self.cases()
        self.assertEqual(len(cases), 3)
        by_offset = {c["tensors"]["prefix"].get("storage_offset", 0): c for c in cases.values()
                     if c["tensors"]["blocks"]["stride"] == [192, 64, 1]}
        packed = by_offset[0]
        self.assertIn("seen 3 times", packed["description"])
        self.assertIn("engine:attn_res", packed["description"])
        self.assertEqual((packed["T"], packed["H"], packed["max_blocks"], packed["num_blocks"], packed["block_write_idx"]),
                         (4, 64, 3, 2, 2))
        self.assertEqual(packed["tensors"]["prefix"], {"stride": [64, 1]})
        self.assertEqual(packed["tensors"]["norm_weight"], {"stride": [1]})
        self.assertEqual((packed["eps"], packed["dtype"], packed["expect"]), (1e-5, "bf16", {"verdict": "pass"}))
        self.assertEqual(by_offset[8]["tensors"]["prefix"], {"stride": [64, 1], "storage_offset": 8})
        self.assertIn("seen 1 time since", by_offset[8]["description"])
        self.assertTrue(any(c["tensors"]["blocks"]["stride"] == [64, 256, 1] for c in cases.values()))

    def test_a_refused_call_is_a_reject_case_and_the_exception_reaches_the_caller(self):
        wrapped = attnres_capture.wrap(fixed_kernel, self.path)
        with self.assertRaises(RuntimeError) as raised:
            call(wrapped, prefix_stride=71, delta=False, norm=False, write=-1)
        self.assertEqual(str(raised.exception), MESSAGE.format(71, "none", 64, 64))
        (case,) = self.cases().values()
        self.assertEqual(case["expect"], {"verdict": "reject", "message": MESSAGE.format(71, "none", 64, 64)})
        self.assertEqual((case["has_delta"], case["has_output_norm"], case["block_write_idx"]), (False, False, -1))
        self.assertNotIn("delta", case["tensors"])

    def test_flashinfer_signature_captures_the_callers_output_layout(self):
        def flashinfer(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, *, num_blocks, block_write_idx,
                       eps, output_norm_eps, out):
            return None

        wrapped = attnres_capture.wrap(flashinfer, self.path, signature="flashinfer")
        out = FakeTensor((4, 64), (72, 1), 16)
        self.assertIsNone(wrapped(FakeTensor((4, 64)), None, FakeTensor((4, 2, 64)), FakeTensor((64,)), FakeTensor((64,)),
                                  None, num_blocks=2, block_write_idx=-1, eps=1e-6, output_norm_eps=0.0, out=out))
        (case,) = self.cases().values()
        self.assertEqual(case["tensors"]["output"], {"stride": [72, 1], "storage_offset": 16})
        self.assertEqual(case["output_norm_eps"], 0.0)

    def test_any_signature_it_can_bind_is_captured_by_name(self):
        def third_party(prefix_sum, block_residual, norm_weight, projection_weight, eps, output_norm_weight=None,
                        output_norm_eps=None, delta=None, num_blocks=None, block_write_idx=-1):
            return "ran"

        wrapped = attnres_capture.wrap(third_party, self.path)
        prefix, blocks, weight = FakeTensor((4, 64), (80, 1)), FakeTensor((4, 3, 64)), FakeTensor((64,))
        self.assertEqual(wrapped(prefix, blocks, weight, weight, 1e-5, delta=FakeTensor((4, 64)), num_blocks=2), "ran")
        # The same call by keyword and in another order is the same case.
        wrapped(block_residual=blocks, prefix_sum=prefix, norm_weight=weight, projection_weight=weight, eps=1e-5,
                num_blocks=2, delta=FakeTensor((4, 64)))
        wrapped.attnres_capture.flush()
        (case,) = self.cases().values()
        self.assertIn("seen 2 times", case["description"])
        self.assertEqual(case["tensors"]["prefix"], {"stride": [80, 1]})
        self.assertEqual((case["num_blocks"], case["block_write_idx"], case["has_delta"], case["has_output_norm"]),
                         (2, -1, True, False))
        # What a signature cannot bind is said when it is wrapped, naming the parameter.
        with self.assertRaisesRegex(binding.BindingError, "parameter 'x' binds to no operand"):
            attnres_capture.wrap(lambda x, blocks, norm_weight, qk_weight, eps: None, self.path)
        renamed = attnres_capture.wrap(lambda x, blocks, norm_weight, qk_weight, eps: None, self.path,
                                       signature="auto;prefix=x")
        renamed(FakeTensor((2, 64)), FakeTensor((2, 1, 64)), weight, weight, 1e-6)
        renamed.attnres_capture.flush()
        self.assertEqual(len(self.cases()), 2)

    def test_a_failure_to_capture_never_reaches_the_caller(self):
        wrapped = attnres_capture.wrap(lambda *args: "ran", self.path)
        stderr = io.StringIO()
        with redirect_stderr(stderr):
            self.assertEqual(wrapped("not a tensor", None, None, None, None, None, 0, -1, 1e-5, 1e-5), "ran")
            self.assertEqual(wrapped(1, 2, 3), "ran")  # too few arguments for the signature: still called
        self.assertEqual(stderr.getvalue().count("attnres_check.capture: capturing stopped"), 1)
        self.assertEqual(self.cases(), {})

    def test_limits_keep_it_from_filling_a_disk(self):
        capture = attnres_capture.Capture(self.path, max_files=1)
        wrapped = attnres_capture.wrap(fixed_kernel, capture=capture)
        call(wrapped)
        call(wrapped, tokens=5)
        call(wrapped, tokens=6)
        self.assertEqual(len(self.cases()), 1)

    def test_the_tool_runs_the_captured_directory(self):
        wrapped = attnres_capture.wrap(fixed_kernel, self.path)
        call(wrapped, hidden=512, num_blocks=3, max_blocks=4, write=3)     # packed: passes the built-in kernels
        with self.assertRaises(RuntimeError):
            call(wrapped, hidden=512, prefix_stride=519)                  # padded: refused with the message
        call(wrapped, hidden=512, blocks_stride=(512, 4 * 512, 1), offset=3)
        reports = tempfile.TemporaryDirectory()
        self.addCleanup(reports.cleanup)
        report = pathlib.Path(reports.name) / "r.json"
        result = run_tool("run", str(self.path), "--backend", "cpu", "--json", str(report))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        cases = json.loads(report.read_text())["cases"]
        self.assertEqual(sorted(c["disposition"] for c in cases), ["passed", "passed", "rejected-as-expected"])
        rejected = next(c for c in cases if c["disposition"] == "rejected-as-expected")
        self.assertEqual(rejected["rejection"], MESSAGE.format(519, 512, 512, 512))
        info = run_tool("info", str(self.path), "--backend", "cpu")
        self.assertIn("layout guard rejects the strides", info.stdout)


class CaptureFromTheEnvironment(unittest.TestCase):
    def test_a_target_imported_later_is_wrapped_and_counted_at_exit(self):
        with tempfile.TemporaryDirectory() as work:
            engine = pathlib.Path(work) / "engine"
            engine.mkdir()
            (engine / "fake_engine.py").write_text(
                "class T:\n"
                "    def __init__(self, *shape): self.shape, self.dtype, self.device = shape, 'torch.bfloat16', 'cpu'\n"
                "    def stride(self):\n"
                "        return (self.shape[1] * self.shape[2], self.shape[2], 1)[-len(self.shape):] if len(self.shape) == 3 "
                "else (self.shape[-1], 1)[-len(self.shape):]\n"
                "    def storage_offset(self): return 0\n"
                "def attn_res(*args): return 'out'\n")
            captured = pathlib.Path(work) / "captured"
            script = ("import attnres_check.capture\n"
                      "from fake_engine import attn_res, T\n"
                      "for _ in range(5): assert attn_res(T(3, 64), None, T(3, 2, 64), T(64), T(64), None, 1, -1, 1e-5, 0.0) == 'out'\n")
            env = dict(os.environ, ATTNRES_CAPTURE_DIR=str(captured), ATTNRES_CAPTURE_TARGETS="fake_engine:attn_res",
                       PYTHONPATH=os.pathsep.join([str(SOURCE / "python"), str(engine)]))
            subprocess.run([sys.executable, "-c", script], env=env, check=True)
            (case_file,) = captured.glob("*.json")
            case = json.loads(case_file.read_text())
            self.assertIn("fake_engine:attn_res", case["description"])
            self.assertIn("seen 5 times", case["description"])
            self.assertEqual(case["tensors"]["blocks"], {"stride": [128, 64, 1]})


@unittest.skipUnless(__import__("importlib").util.find_spec("torch"), "torch is not importable")
class CaptureTensors(unittest.TestCase):
    def test_captured_inputs_replay_bit_for_bit(self):
        import torch

        def mix64sum(tensor):
            """The tool's input checksum over the logical elements (app/casefile/input_checksum.h)."""
            total, mask = 0, (1 << 64) - 1
            for index, bits in enumerate(tensor.contiguous().view(torch.int16).flatten().tolist()):
                z = (((index << 16) | (bits & 0xFFFF)) + 0x9E3779B97F4A7C15) & mask
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
                total = (total + (z ^ (z >> 31))) & mask
            return f"mix64sum:{total:016x}"

        tokens, hidden, max_blocks = 5, 64, 3
        torch.manual_seed(0)
        prefix = torch.randn(tokens, hidden + 7).to(torch.bfloat16)[:, 1:hidden + 1]  # x[:, 1:]: padded, offset 1
        delta = torch.randn(tokens, hidden).to(torch.bfloat16)
        blocks = torch.randn(max_blocks, tokens, hidden).to(torch.bfloat16).transpose(0, 1)  # block-major
        weights = [torch.randn(hidden + 3).to(torch.bfloat16)[3:] for _ in range(3)]
        originals = {"prefix": prefix.clone(), "delta": delta, "blocks": blocks.clone(), "norm_weight": weights[0],
                     "qk_weight": weights[1], "output_norm_weight": weights[2]}
        expected = {name: mix64sum(t) for name, t in originals.items()}

        def overwrites_prefix(prefix, delta, *rest):
            prefix.add_(1.0)  # the call writes prefix: the capture must hold what came before
            return prefix

        with tempfile.TemporaryDirectory() as work:
            capture = attnres_capture.Capture(work, tensors=True)
            wrapped = attnres_capture.wrap(overwrites_prefix, capture=capture, signature="vllm")
            wrapped(prefix, delta, blocks, *weights, 2, -1, 1e-5, 1e-5)
            (case_file,) = pathlib.Path(work).glob("*.json")
            inputs = case_file.with_name(case_file.stem + ".inputs.safetensors")
            self.assertTrue(inputs.exists())
            case = json.loads(case_file.read_text())
            self.assertEqual(case["tensors"]["prefix"], {"stride": [hidden + 7, 1], "storage_offset": 1})
            self.assertEqual(case["tensors"]["blocks"], {"stride": [hidden, tokens * hidden, 1]})
            self.assertEqual(case["tensors"]["qk_weight"], {"stride": [1], "storage_offset": 3})
            report = pathlib.Path(work) / "r.json"
            result = run_tool("run", str(case_file), "--inputs", str(inputs), "--backend", "cpu", "--json", str(report))
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            replayed = json.loads(report.read_text())["cases"][0]
            self.assertEqual(replayed["disposition"], "passed")
            self.assertEqual(replayed["input_checksums"], expected)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
