"""Layer 3 — the checks a graph's guards perform: the kinds of decision (``kinds``) and their
export-native forms for ``torch.export``/PT2E/``torch.compile`` (``lowered``). The guard
functions themselves, which run these checks, are the public :mod:`specfx.guards`."""
