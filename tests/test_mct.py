"""Sony MCT (model-compression-toolkit) quantizes a specfx graph and keeps its guards.

MCT re-traces the model with torch.fx and keeps only the nodes an output depends on: the
graph's output depends on its guards (``specfx.guarded``), so they stay, and with
``specfx.integrations.mct.unquantized_layers()`` mapped to MCT's unquantized ``Equal`` set the
quantized model matches eager within MCT's usual accuracy on the traced path and raises
specfx's GuardError on an input that breaks a decision.

Runs where model-compression-toolkit is installed (.ci/run's MCT stage, its own environment).
MCT imports torchvision (its data generation, its NMS layers' requirement check), which does not
load beside the CPU torch: when torchvision cannot be imported, a minimal stand-in module (a
version and the transform names MCT imports, none of them used by post-training
quantization) is put in ``sys.modules`` before MCT is imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import operator
import sys
import types
import warnings

import pytest
import torch

import specfx
from specfx.integrations.mct import unquantized_layers
from tests.test_guard_flow import Branchy


def _torchvision_stand_in() -> None:
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # (not installed, or a build that does not load beside this torch)
        pass
    modules = {name: types.ModuleType(name) for name in
               ("torchvision", "torchvision.transforms", "torchvision.transforms.transforms")}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []  # type: ignore[attr-defined]
    modules["torchvision"].__version__ = "0.28.0"  # type: ignore[attr-defined]
    modules["torchvision"].transforms = modules["torchvision.transforms"]  # type: ignore[attr-defined]
    modules["torchvision.transforms"].transforms = modules["torchvision.transforms.transforms"]  # type: ignore[attr-defined]
    for name in ("Normalize", "RandomCrop", "RandomHorizontalFlip", "CenterCrop"):
        setattr(modules["torchvision.transforms"], name, type(name, (), {}))
    modules["torchvision.transforms.transforms"]._setup_size = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules.update(modules)


if importlib.util.find_spec("model_compression_toolkit") is None:  # (importorskip would import it)
    pytest.skip("model-compression-toolkit is not installed", allow_module_level=True)
_torchvision_stand_in()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import model_compression_toolkit as mct
    from model_compression_toolkit.core import CoreConfig, QuantizationConfig
    from model_compression_toolkit.core.common.quantization.quantization_config import CustomOpsetLayers

# MCT and its dependencies warn of their own deprecations: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")


def _sqnr(reference: torch.Tensor, approximation: torch.Tensor) -> float:
    return float(10 * torch.log10(reference.pow(2).sum() / (reference - approximation).pow(2).sum()))


def _data():
    generator = torch.Generator().manual_seed(0)
    batches = [torch.rand(2, 3, 8, 8, generator=generator) + 1.0 for _ in range(4)]

    def representative():
        for batch in batches:
            yield [batch]

    return batches, representative


def _first(output):
    return output[0] if isinstance(output, (list, tuple)) else output


def test_quantized_model_matches_and_keeps_the_guard():
    model = Branchy().eval()
    batches, representative = _data()
    gm = specfx.trace(model, batches[0], policy="bool,iter")
    config = CoreConfig(quantization_config=QuantizationConfig(
        custom_tpc_opset_to_layer={"Equal": CustomOpsetLayers(unquantized_layers())}))
    quantized, _ = mct.ptq.pytorch_post_training_quantization(gm, representative, core_config=config)
    fresh = torch.rand(2, 3, 8, 8) + 1.0
    with torch.no_grad():
        assert _sqnr(model(fresh), _first(quantized(fresh))) > 25.0  # 8-bit weights and activations
        with pytest.raises(specfx.GuardError, match=r"bool\(x.mean\(\) > 0\) == True"):
            quantized(-fresh)


def test_without_the_mapping_mct_fails_loudly_not_silently():
    """MCT collects statistics of the guard's result (None) and of the bool it reads, and stops
    while calibrating: no model that would drop the guard is made."""
    model = Branchy().eval()
    batches, representative = _data()
    gm = specfx.trace(model, batches[0], policy="bool,iter")
    with pytest.raises(Exception, match="NoneType|Bool"):
        mct.ptq.pytorch_post_training_quantization(gm, representative)


def test_the_comparisons_listed_are_the_ones_graphs_use():
    assert {operator.gt, torch.Tensor.gt, specfx.guarded} <= set(unquantized_layers())
