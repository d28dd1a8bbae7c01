"""``python -m sparsify`` runs the ``sparsify`` command (see :mod:`sparsify.cli`).

The application's entry point: like :mod:`sparsify.cli`, not part of the core.
"""
import sys

from sparsify.cli import main

if __name__ == "__main__":
    sys.exit(main())
