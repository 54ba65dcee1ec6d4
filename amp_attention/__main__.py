"""``python -m amp_attention``: the ``amp-attention`` command line (amp_attention.cli)."""

import sys

from amp_attention.cli import main

if __name__ == "__main__":
    sys.exit(main())
