"""Layer 8 — where graphs go next: ``torch.export``/PT2E (``export``), FX graph-mode
quantization (``quantize_fx``), Brevitas (``brevitas``), llm-compressor's sequential pipeline
(``llmcompressor``). Optional third-party packages are
imported only by the module that needs them, never by ``import specfx``."""
