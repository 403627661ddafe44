"""Tests of python/attnres_check/binding.py on plain functions (no torch): which parameter each
contract name binds to, how the call is made, what a signature cannot express, and the errors
that name the parameter.

Usage: test_binding.py SOURCE_DIR
"""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(sys.argv[1]) / "python"))
from attnres_check.binding import CONTRACT, Binding, BindingError, bind  # noqa: E402


class Shaped:
    """What cannot_express reads of a tensor: its shape and stride()."""

    def __init__(self, shape, stride=None):
        self.shape, self._stride = shape, stride or (shape[-1], 1)

    def stride(self):
        return self._stride


def values(**changes):
    tokens, hidden = 2, 8
    v = dict(prefix=Shaped((tokens, hidden)), delta=None, blocks=Shaped((tokens, 3, hidden)),
             norm_weight=Shaped((hidden,)), qk_weight=Shaped((hidden,)), output_norm_weight=None, num_blocks=3,
             block_write_idx=-1, eps=1e-6, output_norm_eps=1e-6, output=Shaped((tokens, hidden)))
    v.update(changes)
    return v


def recorder(function):
    """`function`'s Binding, calling a stand-in that records its arguments instead."""
    calls = []
    binding = Binding(function)
    binding.function = lambda *args, **kwargs: calls.append((args, kwargs))
    return binding, calls


class BindByName(unittest.TestCase):
    def test_positional_only_by_position_the_rest_by_keyword(self):
        def f(p, /, blocks, norm_weight, qk_weight, *, eps, out):
            pass

        calls = []
        binding = Binding(f, "auto", [("prefix", "p")])
        binding.function = lambda *args, **kwargs: calls.append((args, kwargs))
        v = values()
        binding.call(v)
        ((args, kwargs),) = calls
        self.assertEqual(args, (v["prefix"],))
        self.assertEqual(set(kwargs), {"blocks", "norm_weight", "qk_weight", "eps", "out"})
        self.assertIs(kwargs["out"], v["output"])
        self.assertTrue(binding.writes_output)

    def test_a_function_of_args_alone_is_called_in_vllms_order(self):
        binding, calls = recorder(lambda *args: None)
        v = values()
        binding.call(v)
        ((args, kwargs),) = calls
        self.assertEqual(args, tuple(v[name] for name in CONTRACT[:10]))
        self.assertEqual(kwargs, {})
        self.assertFalse(binding.writes_output)

    def test_each_missing_parameter_is_a_limit_said_case_by_case(self):
        def f(prefix, blocks, norm_weight, qk_weight, eps):
            pass

        binding = Binding(f)
        self.assertEqual(binding.cannot_express(values()), None)
        self.assertIn("no parameter for delta", binding.cannot_express(values(delta=Shaped((2, 8)))))
        self.assertIn("no parameter for output_norm_weight",
                      binding.cannot_express(values(output_norm_weight=Shaped((8,)))))
        self.assertIn("no parameter for block_write_idx", binding.cannot_express(values(block_write_idx=1)))
        self.assertIn("no parameter for num_blocks", binding.cannot_express(values(num_blocks=2)))
        self.assertIn("returns a fresh output", binding.cannot_express(values(output=Shaped((2, 8), (9, 1)))))

    def test_a_call_is_read_back_as_the_contracts_values(self):
        def f(prefix_sum, block_residual, norm_weight, projection_weight, eps, delta=None, num_blocks=None):
            pass

        binding = Binding(f)
        prefix, blocks = Shaped((2, 8)), Shaped((2, 4, 8))
        read = binding.contract_values((prefix, blocks, "n", "q"), {"eps": 1e-5})
        self.assertIs(read["prefix"], prefix)
        self.assertEqual((read["qk_weight"], read["eps"], read["num_blocks"], read["block_write_idx"]), ("q", 1e-5, 4, -1))
        self.assertIsNone(read["delta"])
        with self.assertRaises(TypeError):
            binding.contract_values((prefix,), {"unknown": 1})

    def test_what_cannot_be_bound_is_an_error_naming_it(self):
        def two_outputs(prefix, blocks, norm_weight, qk_weight, eps, out, output):
            pass

        for make, message in (
                (lambda: Binding(two_outputs), "parameters 'out' and 'output' both bind to output"),
                (lambda: Binding(lambda prefix, blocks, norm_weight, eps: None), "no parameter for qk_weight"),
                (lambda: Binding(lambda prefix, blocks, norm_weight, qk_weight, eps, scale: None), "parameter 'scale'"),
                (lambda: Binding(max), "cannot read the function's signature"),
                (lambda: bind(lambda *a: None, "auto;prefix"), "expected CONTRACT=PARAMETER"),
                (lambda: bind(lambda *a: None, "vllm;prefix=x"), "it goes with --signature auto"),
                (lambda: bind(lambda *a: None, "positional"), "unknown signature 'positional'")):
            with self.assertRaises(BindingError) as raised:
                make()
            self.assertIn(message, str(raised.exception))

    def test_presets_ignore_parameter_names(self):
        binding = bind(lambda a, b, c, d, e, f, *, g, h, i, j, k: None, "flashinfer")
        self.assertEqual([c for _, c in binding.positional], list(CONTRACT[:6]))
        self.assertEqual(binding.keywords["out"], "output")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
