"""Sony's Model Compression Toolkit (MCT) on specfx graphs: what MCT must leave unquantized.

MCT re-traces a model with ``torch.fx``, keeps the nodes an output depends on and puts an
activation quantizer after every node its target platform does not list as unquantized. A
specfx graph's output depends on its guards (``specfx.guarded``), so MCT keeps them, and with
them the comparisons they read (``x.mean() > 0``); it then collects statistics of the guards'
results (None) and fake-quantizes the bools they read, and fails while calibrating
(``Unsupported type for conversion to Numpy array: <class 'NoneType'>``), loudly, instead of
deleting the guards. :func:`unquantized_layers` lists what to
map to an operator set MCT leaves unquantized (``Equal`` in its default IMX500 platform)::

    from model_compression_toolkit.core import CoreConfig, QuantizationConfig
    from model_compression_toolkit.core.common.quantization.quantization_config import CustomOpsetLayers
    from specfx.integrations.mct import unquantized_layers

    config = CoreConfig(quantization_config=QuantizationConfig(
        custom_tpc_opset_to_layer={"Equal": CustomOpsetLayers(unquantized_layers())}))
    quantized, _ = mct.ptq.pytorch_post_training_quantization(gm, data, core_config=config)

The quantized model then checks the guards on every call (``GuardError`` on an input that
breaks one). This module imports nothing of MCT.

>>> import torch, specfx
>>> from specfx.integrations.mct import unquantized_layers
>>> layers = unquantized_layers()
>>> specfx.guard_truth in layers and specfx.guarded in layers and torch.equal in layers
True
"""

from __future__ import annotations

import operator
from typing import Any, List

import torch

from .._graph.guard_flow import guarded
from .._graph.retrace import grad_enabled
from .._capture.tracer import autocast_enabled
from ..guards import GUARDS

__all__ = ["unquantized_layers"]

_COMPARISONS = ("gt", "lt", "ge", "le", "eq", "ne")


def unquantized_layers() -> List[Any]:
    """The callables of a specfx graph whose outputs MCT must not quantize: every guard,
    ``specfx.guarded`` (its output is the tensor it was handed, already quantized), the reads of
    grad mode and autocast, and the comparisons and logical ops whose bool results guards read;
    plus ``torch.equal``, the member of MCT's ``Equal`` set this list replaces."""
    layers: List[Any] = [torch.equal, guarded, grad_enabled, autocast_enabled]
    layers += sorted(set(GUARDS.values()), key=lambda guard: guard.__name__)
    for name in _COMPARISONS:
        layers += [getattr(operator, name), getattr(torch, name), getattr(torch.Tensor, name)]
    layers += [operator.not_, operator.and_, operator.or_, torch.logical_not, torch.logical_and,
               torch.logical_or, torch.Tensor.logical_not, torch.Tensor.logical_and, torch.Tensor.logical_or,
               torch.isnan, torch.Tensor.isnan, torch.any, torch.all, torch.Tensor.any, torch.Tensor.all]
    return layers
