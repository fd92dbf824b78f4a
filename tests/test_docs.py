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
