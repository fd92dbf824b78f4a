#!/usr/bin/env python
"""Compare, on the same models, three ways into a quantized program:

- ``torch.export`` alone (non-strict) → torchao PT2E,
- ``specfx.export`` → torchao PT2E (``X86InductorQuantizer``, ``prepare_pt2e``/``convert_pt2e``),
- ``specfx.trace`` → FX graph-mode quantization (``prepare_fx``/``convert_fx``, deprecated upstream).

    python -m tools.peers.export_routes  # the table of docs/quantization.md
    python -m tools.peers.export_routes --models data-branch moe-router

Per route: whether it produces a quantized program, how many checks the program keeps
(specfx decisions → assertion nodes and export's input guards; FX: guard nodes), the SQNR
of the quantized output against float on a fresh input, and the wall time of export +
prepare + calibrate + convert (one run, CPU).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from torch import nn

import specfx
from specfx import Policy

Call = Tuple[Tuple[Any, ...], Dict[str, Any]]


class DataBranch(nn.Module):
    """A branch on the input's data: torch.export fails with GuardOnDataDependentSymNode."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        if x.mean() > 0:
            h = F.relu(h)
        else:
            h = torch.tanh(h)
        return self.out(h)


class Router(nn.Module):
    """A mixture-of-experts layer: top-1 routing, a loop over the experts that got tokens."""

    def __init__(self, dim: int = 8, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.gate(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for index in torch.unique(choice).tolist():
            rows = choice == index
            out = out + rows.unsqueeze(-1) * self.experts[index](x)
        return out


class LastHidden(nn.Module):
    """``model(input_ids, attention_mask=...).last_hidden_state``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, attention_mask=attention_mask).last_hidden_state


def tiny_mixtral() -> nn.Module:
    """MixtralModel (1 layer, 4 experts, hidden 16) with random weights."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.MixtralConfig(
        vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        use_cache=False)
    return LastHidden(transformers.MixtralModel(config).eval()).eval()


def _zoo() -> Any:
    from tools.zoo import run as zoo  # imported when a zoo model is built (it imports transformers)

    return zoo


def _models() -> Dict[str, Callable[[], Tuple[nn.Module, Call, Call, Policy]]]:
    """name -> (model, example call, fresh call, policy)."""

    def data_branch() -> Tuple[nn.Module, Call, Call, Policy]:
        torch.manual_seed(0)
        return DataBranch().eval(), ((torch.randn(4, 8) + 2,), {}), ((torch.randn(8, 8) + 2,), {}), Policy(bool=True)

    def router() -> Tuple[nn.Module, Call, Call, Policy]:
        torch.manual_seed(0)
        x = torch.randn(16, 8)
        return Router().eval(), ((x,), {}), ((x + 0.001 * torch.randn_like(x),), {}), Policy(iter=True, scalars=True)

    def mixtral() -> Tuple[nn.Module, Call, Call, Policy]:
        torch.manual_seed(0)
        ids = torch.randint(0, 100, (2, 8))
        mask = torch.ones(2, 8, dtype=torch.long)
        return tiny_mixtral(), ((ids, mask), {}), ((ids, mask), {}), Policy(iter=True, bool=True, scalars=True)

    def zoo_case(name: str) -> Callable[[], Tuple[nn.Module, Call, Call, Policy]]:
        def build() -> Tuple[nn.Module, Call, Call, Policy]:
            built = _zoo().CASES_BY_NAME[name].build()
            return built.model, built.example, built.example, Policy(bool=True)

        return build

    return {"data-branch": data_branch, "moe-router": router, "hf-mixtral": mixtral,
            "hf-bert": zoo_case("hf-bert"), "hf-vit": zoo_case("hf-vit")}


def sqnr(reference: torch.Tensor, output: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB."""
    return float(20 * torch.log10(reference.norm() / (output - reference).norm()))


def _output(value: Any) -> torch.Tensor:
    return value.last_hidden_state if hasattr(value, "last_hidden_state") else value


def _pt2e(program: torch.export.ExportedProgram, example: Call) -> torch.nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*example[0], **example[1])
    return convert_pt2e(prepared)


def _checks(module: torch.nn.Module) -> int:
    targets = ("_assert_async", "_assert_scalar", "_assert_tensor_metadata")
    asserts = sum(1 for n in module.graph.nodes if any(t in str(n.target) for t in targets))
    return asserts + (1 if hasattr(module, "_guards_fn") else 0)


def _route(run: Callable[[], Tuple[torch.nn.Module, str]], model: nn.Module, fresh: Call) -> Dict[str, str]:
    start = time.perf_counter()
    try:
        quantized, kept = run()
    except Exception as error:  # the table reports the failure
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return {"result": f"fails: {type(error).__name__}: {first[:60]}", "kept": "–", "sqnr": "–",
                "time": f"{time.perf_counter() - start:.1f}"}
    elapsed = time.perf_counter() - start
    try:
        with torch.no_grad():
            measured = sqnr(_output(model(*fresh[0], **fresh[1])), _output(quantized(*fresh[0], **fresh[1])))
    except Exception as error:  # quantized, but the program does not run
        first = str(error).strip().splitlines()[0]
        return {"result": f"runs into {type(error).__name__}: {first[:60]}", "kept": kept, "sqnr": "–",
                "time": f"{elapsed:.1f}"}
    return {"result": "quantized", "kept": kept, "sqnr": f"{measured:.1f}", "time": f"{elapsed:.1f}"}


def compare(name: str) -> Dict[str, Dict[str, str]]:
    """The three routes on one model."""
    model, example, fresh, policy = _models()[name]()
    args, kwargs = example

    def plain() -> Tuple[torch.nn.Module, str]:
        program = torch.export.export(model, args, kwargs, strict=False)
        quantized = _pt2e(program, example)
        return quantized, f"{_checks(quantized)} (export's own)"

    def specialized() -> Tuple[torch.nn.Module, str]:
        program = specfx.export(model, args, kwargs or None, policy=policy)
        quantized = _pt2e(program, example)
        decisions = len(specfx.trace(model, args, kwargs or None, policy=policy).specializations)
        return quantized, f"{decisions} decisions → {_checks(quantized)} checks"

    def fx_route() -> Tuple[torch.nn.Module, str]:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

        gm = specfx.trace(model, args, kwargs or None, policy=policy)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            prepared = prepare_fx(copy.deepcopy(gm), get_default_qconfig_mapping("x86"), example_inputs=args)
            prepared(*args, **kwargs)
            quantized = convert_fx(prepared)
        guards = sum(1 for n in quantized.graph.nodes if n.op == "call_function"
                     and getattr(n.target, "__module__", "") == "specfx")
        return quantized, f"{len(gm.specializations)} decisions → {guards} guards"

    return {"torch.export": _route(plain, model, fresh), "specfx.export": _route(specialized, model, fresh),
            "FX route": _route(fx_route, model, fresh)}


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(_models()))
    options = parser.parse_args(argv)
    print("| model | route | result | checks kept | SQNR (dB) | time (s) |")
    print("|---|---|---|---|---|---|")
    for name in options.models:
        for route, row in compare(name).items():
            print(f"| {name} | {route} | {row['result']} | {row['kept']} | {row['sqnr']} | {row['time']} |",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
