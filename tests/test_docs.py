"""Code in the README and docs runs as written."""

from __future__ import annotations

import linecache
import pathlib
import re

import pytest

import specfx

ROOT = pathlib.Path(__file__).resolve().parent.parent


def python_blocks(path: pathlib.Path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def run_document(path: pathlib.Path) -> None:
    """Run a document's python blocks in order in one namespace; `# raises X` blocks must raise X."""
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    for number, block in enumerate(python_blocks(path), start=1):
        filename = f"<{path.name} block {number}>"
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        code = compile(block, filename, "exec")
        first = block.lstrip().splitlines()[0]
        if first.startswith("# raises "):
            expected = getattr(specfx, first.split()[2])
            with pytest.raises(expected):
                exec(code, namespace)
        else:
            exec(code, namespace)


DOCS = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_document_blocks_run(path, capsys):
    """Every python block in docs/ runs as written (and raises where it says so)."""
    run_document(path)


def test_api_reference_is_current():
    """docs/api.md is what tools/gen_api.py generates from the docstrings today."""
    from tools import gen_api

    assert (ROOT / "docs" / "api.md").read_text() == gen_api.render(), "run python -m tools.gen_api"


def test_comparison_is_measured():
    """docs/comparison.md's table is what tools/peers/comparison.py measures today."""
    from tools.peers import comparison as compare

    assert compare.main(["--check"]) == 0, "run python -m tools.peers.comparison and paste its table"


class TestReadme:
    def test_readme_example(self, capsys):
        """The README example runs; its last line raises the GuardError it promises."""
        (block,) = python_blocks(ROOT / "README.md")
        *body, last = block.strip().splitlines()
        source = "\n".join(body) + "\n"
        linecache.cache["<README.md>"] = (len(source), None, source.splitlines(True), "<README.md>")
        namespace: dict = {}
        exec(compile(source, "<README.md>", "exec"), namespace)
        assert "specfx_guard_len" in capsys.readouterr().out
        with pytest.raises(specfx.GuardError, match=r"<README.md>:\d+: return self.call_cat\(\*x\)"):
            exec(compile(last, "<README.md>", "exec"), namespace)

    def test_quick_start_commands(self):
        """The Quick start has exactly the two documented command lines, one per job."""
        text = (ROOT / "README.md").read_text()
        commands = re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)
        assert commands == ["bash tools/install.sh && python -m specfx demo",
                            "bash tools/install.sh test && python -m pytest"]
        ci = (ROOT / ".ci" / "run").read_text()
        assert commands[1] in ci
