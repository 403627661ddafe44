"""How a Python AttnRes entry point is called: each of its parameters bound, by name, to an
operand or scalar of the AttnRes contract.

`auto` reads the function's signature. A parameter binds to the contract name it carries
(prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, num_blocks, block_write_idx,
eps, output_norm_eps, output), to one of the common aliases (prefix_sum, block_residual,
projection_weight, out, ...), or to the contract name that `--arg CONTRACT=PARAMETER` gives it.
A function that takes only *args is called in vLLM's positional order. `vllm` and `flashinfer`
are presets: vLLM's ten positional arguments with the output returned, and FlashInfer's six
positional tensors with keyword scalars and a caller-owned `out=`.

The same binding is used by the tool's Python bridge, a bundle's repro.py and
attnres_check.capture. It needs nothing beyond the standard library.
"""
import inspect

CONTRACT = ("prefix", "delta", "blocks", "norm_weight", "qk_weight", "output_norm_weight", "num_blocks",
            "block_write_idx", "eps", "output_norm_eps", "output")
# Without these no case can be called.
REQUIRED = ("prefix", "blocks", "norm_weight", "qk_weight", "eps")
ALIASES = {"prefix_sum": "prefix", "block_residual": "blocks", "block_residuals": "blocks",
           "projection_weight": "qk_weight", "out": "output"}
SIGNATURES = ("auto", "vllm", "flashinfer")
VLLM_ORDER = CONTRACT[:10]


class BindingError(ValueError):
    """The function's parameters cannot be bound to the contract; the text names the parameter."""


class Binding:
    """A function with each contract name bound to a positional slot or a keyword parameter."""

    def __init__(self, function, signature="auto", arguments=()):
        """`arguments`: (contract, parameter) pairs, as --arg CONTRACT=PARAMETER gives them. The
        errors' texts speak of "the function"; the caller says which."""
        self.function = function
        arguments = list(arguments)
        for contract, parameter in arguments:
            if contract not in CONTRACT:
                raise BindingError(f"--arg {contract}={parameter}: {contract} is not part of the AttnRes contract "
                                   f"(one of {', '.join(CONTRACT)})")
        if signature not in SIGNATURES:
            raise BindingError(f"unknown signature {signature!r}: expected {', '.join(SIGNATURES)}")
        if arguments and signature != "auto":
            raise BindingError(f"--arg binds parameters by name: it goes with --signature auto, not {signature}")
        # `positional`: the parameters passed by position, in order, each (name, contract name);
        # `keywords`: parameter -> contract name, passed by keyword; `order`: every parameter a
        # caller may pass by position, in order, each (name, contract name or None); the defaults
        # of bound parameters.
        self.positional, self.keywords, self.order, self.defaults = [], {}, [], {}
        if signature == "vllm":
            self.positional = [(name, name) for name in VLLM_ORDER]
        elif signature == "flashinfer":
            self.positional = [(name, name) for name in VLLM_ORDER[:6]]
            self.keywords = {name: name for name in VLLM_ORDER[6:]}
            self.keywords["out"] = "output"
        else:
            self._bind_by_name(arguments)
        self.order = self.order or list(self.positional)
        self.bound = {contract for _, contract in self.positional if contract} | set(self.keywords.values())
        for contract in REQUIRED:
            if contract not in self.bound:
                raise BindingError(f"the function has no parameter for {contract}; "
                                   f"name it with --arg {contract}=PARAMETER")

    def _parameters(self):
        try:
            return list(inspect.signature(self.function).parameters.values())
        except (TypeError, ValueError) as error:
            raise BindingError(f"cannot read the function's signature ({error}); "
                               "call it with --signature vllm or --signature flashinfer") from None

    def _bind_by_name(self, arguments):
        parameters = self._parameters()
        kinds = {p.kind for p in parameters}
        if inspect.Parameter.VAR_POSITIONAL in kinds and all(
                p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for p in parameters):
            self.positional = [(name, name) for name in VLLM_ORDER]
            return
        names = [p.name for p in parameters]
        explicit = {}
        for contract, parameter in arguments:
            if parameter not in names:
                raise BindingError(f"--arg {contract}={parameter}: the function has no parameter {parameter!r} "
                                   f"(it has {', '.join(names) or 'none'})")
            if contract in explicit.values() or parameter in explicit:
                raise BindingError(f"--arg {contract}={parameter}: {contract} or {parameter} is named twice")
            explicit[parameter] = contract
        named = set(explicit.values())
        taken = {}
        for p in parameters:
            if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            contract = explicit.get(p.name)
            if contract is None:
                implied = p.name if p.name in CONTRACT else ALIASES.get(p.name)
                contract = implied if implied not in named else None
            if contract is not None and contract in taken:
                raise BindingError(f"parameters {taken[contract]!r} and {p.name!r} both bind to "
                                   f"{contract}; name the one that is with --arg {contract}=PARAMETER")
            if contract is None and p.default is inspect.Parameter.empty:
                raise BindingError(f"parameter {p.name!r} binds to no operand of the AttnRes contract "
                                   f"({', '.join(CONTRACT)}); name it with --arg CONTRACT={p.name}")
            if contract is not None:
                taken[contract] = p.name
                if p.default is not inspect.Parameter.empty:
                    self.defaults[contract] = p.default
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                self.order.append((p.name, contract))
            if p.kind == inspect.Parameter.POSITIONAL_ONLY:
                self.positional.append((p.name, contract))
            elif contract is not None:
                self.keywords[p.name] = contract
        # A positional-only parameter left to its default ends the positional arguments.
        while self.positional and self.positional[-1][1] is None:
            self.positional.pop()
        if any(contract is None for _, contract in self.positional):
            unbound = next(name for name, contract in self.positional if contract is None)
            raise BindingError(f"positional-only parameter {unbound!r} binds to no operand of the "
                               f"AttnRes contract and comes before one that does; name it with --arg CONTRACT={unbound}")

    @property
    def writes_output(self):
        """Whether the caller owns the output (out=/output=), rather than the function returning it."""
        return "output" in self.bound

    def limits(self):
        """What this binding cannot express, each with the reason: delta, output_norm, block_write,
        partial_blocks (num_blocks below the blocks tensor's), padded_output."""
        missing = {c: f"the function has no parameter for {c}" for c in CONTRACT if c not in self.bound}
        limits = {}
        if "delta" in missing:
            limits["delta"] = missing["delta"] + ": a case with delta cannot be expressed"
        for contract in ("output_norm_weight", "output_norm_eps"):
            if contract in missing:
                limits.setdefault("output_norm", missing[contract] + ": a case with an output norm cannot be expressed")
        if "block_write_idx" in missing:
            limits["block_write"] = missing["block_write_idx"] + ": a case that writes a block cannot be expressed"
        if "num_blocks" in missing:
            limits["partial_blocks"] = (missing["num_blocks"] + ": a case that uses fewer blocks than the blocks "
                                        "tensor holds cannot be expressed")
        if "output" in missing:
            limits["padded_output"] = ("the function returns a fresh output: a case with a padded output row "
                                       "stride cannot be expressed")
        return limits

    def cannot_express(self, values):
        """Why a call with `values` (contract name -> value; tensors with shape and stride()) is
        beyond this binding (a reason of limits()), or None."""
        output = values["output"]
        holds = {"delta": values["delta"] is not None, "output_norm": values["output_norm_weight"] is not None,
                 "block_write": values["block_write_idx"] >= 0,
                 "partial_blocks": values["num_blocks"] != values["blocks"].shape[1],
                 "padded_output": output is not None and output.stride()[0] != output.shape[1]}
        limits = self.limits()
        return next((limits[fact] for fact, true in holds.items() if true and fact in limits), None)

    def call(self, values):
        """Calls the function with `values` (contract name -> value); returns what it returns."""
        args = [values[contract] for _, contract in self.positional]
        kwargs = {parameter: values[contract] for parameter, contract in self.keywords.items()}
        return self.function(*args, **kwargs)

    def contract_values(self, args, kwargs):
        """The contract's values of a call made with (args, kwargs), as `call` would have made it:
        each absent name None (num_blocks and block_write_idx as the function would see them).
        Raises TypeError for arguments this binding does not know."""
        if len(args) > len(self.order):
            raise TypeError(f"{len(args)} positional arguments; the function takes {len(self.order)}")
        values = dict.fromkeys(CONTRACT)
        values.update(self.defaults)
        for (_, contract), value in zip(self.order, args):
            if contract is not None:
                values[contract] = value
        by_name = dict(self.keywords)
        by_name.update({name: contract for name, contract in self.order})
        for name, value in kwargs.items():
            if name not in by_name:
                raise TypeError(f"unexpected argument {name!r}")
            if by_name[name] is not None:
                values[by_name[name]] = value
        if values["num_blocks"] is None and values["blocks"] is not None:
            values["num_blocks"] = values["blocks"].shape[1]
        if values["block_write_idx"] is None:
            values["block_write_idx"] = -1
        return values

    def describe(self):
        """The binding as CONTRACT=PARAMETER words, in the contract's order."""
        parameter = {contract: name for name, contract in self.positional if contract}
        parameter.update({contract: name for name, contract in self.keywords.items()})
        return ", ".join(f"{c}={parameter[c]}" for c in CONTRACT if c in parameter)


def parse_signature(text):
    """(signature, [(contract, parameter)]) of the text the tool passes its bridge and writes in a
    bundle: "auto", "vllm", "flashinfer", or "auto;prefix=prefix_sum;blocks=block_residual"."""
    signature, *pairs = text.split(";")
    arguments = []
    for pair in pairs:
        contract, equals, parameter = pair.partition("=")
        if not equals or not contract or not parameter:
            raise BindingError(f"expected CONTRACT=PARAMETER, got {pair!r}")
        arguments.append((contract, parameter))
    return signature, arguments


def bind(function, text):
    """The Binding `text` (as parse_signature reads it) gives `function`."""
    signature, arguments = parse_signature(text)
    return Binding(function, signature, arguments)
