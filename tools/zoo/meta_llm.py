#!/usr/bin/env python
"""Trace a 7B-parameter Llama-style decoder whose weights live on the ``meta`` device.

    python -m tools.zoo.meta_llm             # 32 layers, hidden 4096 (Llama-2-7B shapes, ~6.7e9 parameters)
    python -m tools.zoo.meta_llm --layers 2  # the same architecture, 2 layers
    python -m tools.zoo.meta_llm --json

The model is transformers' own ``LlamaForCausalLM`` built from a config inside
``with torch.device("meta"):``, so no weight is allocated; the example input ids are
meta tensors too. specfx runs every op on meta tensors alongside the trace (shapes
are known, data is not), so the trace costs what a meta forward costs, and decisions
that need data raise ``SpecializationError``.

The model is called as users call it (transformers' vmapped causal mask traces as
is); one piece is a leaf module:

- the rotary embedding, wrapped by ``MetaSafeRotary``: transformers enters
  ``torch.autocast(device_type=x.device.type)``, and torch 2.13 cannot enter autocast
  for the ``meta`` device ("unsupported scalarType"), so eager transformers cannot run
  on meta at all; ``MetaSafeRotary`` computes the same cos/sin without autocast when
  the input is on meta and calls the original module otherwise.

Reports trace time and peak RSS (``resource.getrusage``; targets: < 30 s, < 2 GiB)
and exits with 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any, Dict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch import nn

import specfx
from specfx import Policy
from tools.zoo.models import llama_config

TARGET_SECONDS = 30.0
TARGET_RSS_BYTES = 2 * 1024 ** 3


class MetaSafeRotary(nn.Module):
    """transformers' Llama rotary embedding without ``torch.autocast`` for meta inputs
    (autocast cannot be entered for device 'meta' in torch 2.13); same cos/sin otherwise."""

    def __init__(self, rotary: nn.Module):
        super().__init__()
        self.rotary = rotary

    def forward(self, x, position_ids):
        if x.device.type != "meta":
            return self.rotary(x, position_ids)
        inv_freq = self.rotary.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv_freq @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        scaling = self.rotary.attention_scaling
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)


class CausalLM(nn.Module):
    """``LlamaForCausalLM(input_ids, attention_mask=ones).logits`` (an all-ones mask, as a
    tokenizer gives for unpadded text; without one transformers looks for packed sequences
    in the position ids, which needs data)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, attention_mask=torch.ones_like(input_ids)).logits


def build_meta_llama(layers: int = 32, hidden: int = 4096, intermediate: int = 11008, heads: int = 32,
                     kv_heads: int = 32, vocab: int = 32000) -> CausalLM:
    """A Llama-2-7B-shaped ``LlamaForCausalLM`` (for the defaults) with every weight on ``meta``."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = llama_config(layers=layers, hidden=hidden, intermediate=intermediate, heads=heads,
                          kv_heads=kv_heads, vocab=vocab)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    model.model.rotary_emb = MetaSafeRotary(model.model.rotary_emb)
    return CausalLM(model).eval()


def trace_meta(model: CausalLM, batch: int = 2, length: int = 128) -> torch.fx.GraphModule:
    """Trace with meta example input ids; lengths and batch sizes stay symbolic (no SHAPES)."""
    input_ids = torch.zeros(batch, length, dtype=torch.long, device="meta")
    return specfx.trace(model, (input_ids,), policy=Policy(iter=True, bool=True),
                        leaf_modules=[MetaSafeRotary])


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def measure(layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, batch: int,
            length: int) -> Dict[str, Any]:
    """Build, trace and run the meta model; times, memory and the graph's size."""
    import transformers  # noqa: F401  (imported before the first RSS reading)

    rss_before = peak_rss_bytes()
    started = time.perf_counter()
    model = build_meta_llama(layers, hidden, intermediate, heads, kv_heads)
    built = time.perf_counter()
    gm = trace_meta(model, batch, length)
    traced = time.perf_counter()
    other = torch.zeros(batch + 1, length // 2, dtype=torch.long, device="meta")
    logits = gm(other)
    ran = time.perf_counter()
    data_error = ""
    try:
        specfx.trace(lambda x: x * 2 if x.sum() > 0 else x, torch.empty(4, device="meta"),
                     policy=Policy(bool=True))
    except specfx.SpecializationError as error:
        data_error = str(error).splitlines()[0]
    return {
        "layers": layers, "hidden": hidden, "parameters": sum(p.numel() for p in model.parameters()),
        "all_parameters_on_meta": all(p.device.type == "meta" for p in model.parameters()),
        "build_seconds": round(built - started, 3), "trace_seconds": round(traced - built, 3),
        "run_seconds": round(ran - traced, 3), "nodes": len(gm.graph.nodes),
        "specializations": len(gm.specializations),
        "other_input_logits_shape": list(logits.shape), "logits_device": logits.device.type,
        "peak_rss_mib": round(peak_rss_bytes() / 2 ** 20, 1),
        "rss_after_imports_mib": round(rss_before / 2 ** 20, 1),
        "data_dependent_decision_on_meta": data_error,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    result = measure(options.layers, options.hidden, options.intermediate, options.heads, options.kv_heads,
                     options.batch, options.length)
    ok = result["trace_seconds"] < TARGET_SECONDS and result["peak_rss_mib"] * 2 ** 20 < TARGET_RSS_BYTES
    result["targets_met"] = ok
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"Llama-style decoder on meta: {result['layers']} layers, hidden {result['hidden']}, "
              f"{result['parameters'] / 1e9:.2f}e9 parameters "
              f"(all on meta: {result['all_parameters_on_meta']})")
        print(f"  build {result['build_seconds']:.2f} s, trace {result['trace_seconds']:.2f} s "
              f"(target < {TARGET_SECONDS:.0f} s), {result['nodes']} nodes, "
              f"{result['specializations']} specializations")
        print(f"  peak RSS {result['peak_rss_mib']:.0f} MiB (target < {TARGET_RSS_BYTES / 2 ** 20:.0f} MiB; "
              f"{result['rss_after_imports_mib']:.0f} MiB after imports)")
        print(f"  graph on another batch/length: logits {tuple(result['other_input_logits_shape'])} on "
              f"{result['logits_device']} in {result['run_seconds']:.2f} s")
        print(f"  a data-dependent branch on meta: {result['data_dependent_decision_on_meta']}")
        print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
