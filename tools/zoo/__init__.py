"""Real models traced and checked against eager (README.md lists the entry points)."""
