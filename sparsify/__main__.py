"""``python -m sparsify`` runs the ``sparsify`` command (see :mod:`sparsify.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
