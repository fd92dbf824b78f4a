"""specfx beside the other PyTorch graph tools (README.md lists the entry points)."""
