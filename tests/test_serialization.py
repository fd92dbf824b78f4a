"""Saved graphs load: torch.save in this process, torch.load in a fresh one (only torch and
specfx imported; the model's own libraries are imported by the pickle), for each family of
models (encoder, decoder, encoder-decoder, vision, MoE), the README example and a graph with
container inputs and outputs. Each loaded graph runs, equals eager exactly, keeps its records
(explain works) and fires its guards. Graphs saved by earlier versions still load."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import specfx
from specfx import Policy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES))
import containers_model  # noqa: E402

from tests.models import SplitCat  # noqa: E402 - the README's example


def ids(batch, length, pad=0):
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        mask[0, length - pad:] = 0
    return torch.randint(0, 100, (batch, length)), mask


def encoder():
    """DistilBERT traced with Policy(bool=True) on a padded batch (a reported case)."""
    model = transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)).eval()
    example, other = ids(2, 8, pad=3), ids(3, 6, pad=2)
    # One graph serves padded and unpadded batches (transformers keeps its FX mask path), so
    # the violating call leaves the mask out: traced as a Tensor, refused at the graph's entry.
    return (model, Policy(bool=True), ((), dict(zip(("input_ids", "attention_mask"), example))),
            ((), dict(zip(("input_ids", "attention_mask"), other))),
            ((), {"input_ids": ids(2, 8)[0]}))


def decoder():
    model = transformers.GPTNeoModel(transformers.GPTNeoConfig(
        vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]],
        max_position_embeddings=64, use_cache=False)).eval()
    return (model, Policy(iter=True, bool=True), ((ids(2, 8)[0],), {}), ((ids(3, 5)[0],), {}),
            ((None,), {}))  # input_ids None: the entry check


def encoder_decoder():
    model = transformers.T5Model(transformers.T5Config(
        vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, use_cache=False)).eval()

    def call(length):
        source, mask = ids(2, length, pad=2)
        return (source,), {"attention_mask": mask, "decoder_input_ids": ids(2, 5)[0]}

    return model, Policy(shapes=True), call(8), call(8), call(12)  # a new source length breaks a shape


def vision():
    model = transformers.ViTModel(transformers.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64)).eval()
    return (model, Policy(bool=True), ((torch.randn(2, 3, 32, 32),), {}), ((torch.randn(3, 3, 32, 32),), {}),
            ((torch.randn(2, 3, 48, 48),), {}))  # another image size: the size check flips


def moe():
    model = transformers.Qwen2MoeModel(transformers.Qwen2MoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, use_cache=False)).eval()
    return (model, Policy(iter=True, bool=True, scalars=True), ((ids(2, 8)[0],), {}), ((ids(2, 8)[0],), {}),
            (([[1, 2]],), {}))  # a list for input_ids: the entry check


def readme():
    return (SplitCat(), Policy(iter=True), ((torch.randn(1, 4, 10, 10),), {}), ((torch.randn(8, 4, 3, 3),), {}),
            ((torch.randn(1, 6, 3, 3),), {}))


def containers():
    batch, scales = containers_model.example()
    other = ({"x": torch.randn(3, 4, 2, 2), "bias": torch.randn(3, 4, 2, 2)}, [0.5])
    return (containers_model.SplitCat(), Policy(iter=True), ((batch, scales), {}), (other, {}),
            (({"x": batch["x"]}, scales), {}))


FAMILIES = {"encoder": encoder, "decoder": decoder, "encoder-decoder": encoder_decoder, "vision": vision,
            "moe": moe, "readme": readme, "containers": containers}

LOADER = textwrap.dedent("""
    import json, sys
    import torch, specfx
    import torch.utils._pytree as pytree
    results = {}
    torch.set_num_threads(int(sys.argv[2]))  # the saving process's: same kernels, same bits
    for name, path in json.loads(sys.argv[1]).items():
        try:
            gm = torch.load(path + ".graph.pt", weights_only=False)
            (args, kwargs), expected, (bad_args, bad_kwargs), records = torch.load(path + ".io.pt", weights_only=False)
            actual = gm(*args, **kwargs)
            expected_leaves, expected_spec = pytree.tree_flatten(expected)
            actual_leaves, actual_spec = pytree.tree_flatten(actual)
            equal = actual_spec == expected_spec and all(
                torch.equal(a, e) if isinstance(e, torch.Tensor) else a == e
                for a, e in zip(actual_leaves, expected_leaves))
            try:
                gm(*bad_args, **bad_kwargs)
                fired = "no error"
            except specfx.GuardError as error:
                fired = "GuardError"
            except Exception as error:
                fired = f"{type(error).__name__}: {error}"
            results[name] = {"type": type(actual).__name__, "equal": equal, "fired": fired,
                             "records": len(gm.specializations), "explained": len(specfx.explain(gm)) > 0}
        except Exception as error:
            results[name] = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Trace and save every family here; load and run them all in one fresh process."""
    directory = tmp_path_factory.mktemp("saved")
    paths, expected_types = {}, {}
    for name, build in FAMILIES.items():
        torch.manual_seed(0)
        model, policy, (args, kwargs), other, violating = build()
        gm = specfx.trace(model, args, kwargs, policy=policy)
        expected = model(*other[0], **other[1])
        path = str(directory / name)
        torch.save(gm, path + ".graph.pt")
        torch.save((other, expected, violating, len(gm.specializations)), path + ".io.pt")
        paths[name], expected_types[name] = path, (type(expected).__name__, len(gm.specializations))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(FIXTURES)]), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", LOADER, json.dumps(paths), str(torch.get_num_threads())],
                          capture_output=True, text=True,
                          env=environment, cwd=str(ROOT), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), expected_types


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_loads_runs_equals_eager_and_guards(loaded, name):
    """In a fresh process the graph loads, returns eager's type and values exactly, keeps its
    records and raises GuardError on an input that breaks an assumption."""
    results, expected = loaded
    result = results[name]
    assert "error" not in result, result
    assert (result["type"], result["records"]) == expected[name]
    assert result["equal"] and result["explained"]
    assert result["fired"] == "GuardError"


def test_containers_graph_saved_by_this_release_loads():
    """The container graph saved by the release named in its file (tests/fixtures/containers_model.py)."""
    for path in sorted(FIXTURES.glob("containers_*.pt")):
        gm = torch.load(path, weights_only=False)
        batch, scales = containers_model.example()
        actual = gm(batch, scales)
        expected = containers_model.SplitCat()(batch, scales)
        assert type(actual) is type(expected) and type(actual["halves"]) is containers_model.Halves
        assert torch.equal(actual["out"], expected["out"])
        with pytest.raises(specfx.GuardError, match=r"batch has keys \('x',\)"):
            gm({"x": batch["x"]}, scales)
        assert [str(s.kind) for s in gm.specializations] == ["iter"]


def test_deepcopy_and_retrace_of_a_loaded_graph(tmp_path):
    """A loaded graph deep-copies and re-traces (specfx.trace(gm), torch.fx.symbolic_trace(gm))
    into the same code, factory calls included; copies and re-traces by specfx keep the records
    exactly (torch.load starts gm.meta empty: the graph pickles through specfx's loader)."""
    import copy

    model, policy, (args, kwargs), other, _ = encoder()
    gm = specfx.trace(model, args, kwargs, policy=policy)
    torch.save(gm, tmp_path / "g.pt")
    loaded = torch.load(tmp_path / "g.pt", weights_only=False)
    assert loaded.code == gm.code
    for again in (copy.deepcopy(loaded), specfx.trace(loaded), torch.fx.symbolic_trace(loaded)):
        assert again.code.count("specfx_guard_") == gm.code.count("specfx_guard_")
        assert torch.equal(again(*other[0], **other[1]).last_hidden_state,
                           model(*other[0], **other[1]).last_hidden_state)
    for again in (copy.deepcopy(loaded), specfx.trace(loaded)):
        assert again.code == gm.code
        assert again.specializations == gm.specializations
        assert copy.deepcopy(again).specializations == gm.specializations


def test_pickles_name_only_the_public_package():
    """A saved graph imports what its code calls from `specfx` itself, never from a private
    module: later releases may move those modules, and their files must still load."""
    import pickle
    import re

    def f(x, y):
        try:
            return x @ y
        except RuntimeError:
            return x * y.sum()

    gm = specfx.trace(f, (torch.ones(2, 3), torch.ones(3, 2)), policy=Policy(bool=True))
    modules = set(re.findall(rb"from (specfx[\w.]*) import", pickle.dumps(gm)))
    assert modules == {b"specfx"}


def test_saved_fixtures_name_only_the_public_package():
    """The graphs kept under tests/fixtures (one per release) import only from `specfx`."""
    import re
    import zipfile

    for path in sorted(pathlib.Path(__file__).parent.joinpath("fixtures").glob("*.pt")):
        with zipfile.ZipFile(path) as archive:
            text = b"".join(archive.read(name) for name in archive.namelist() if name.endswith(".pkl"))
        assert set(re.findall(rb"from (specfx[\w.]*) import", text)) <= {b"specfx"}, path.name
