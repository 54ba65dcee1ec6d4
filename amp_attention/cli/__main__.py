"""``python -m amp_attention.cli``."""

from . import main

raise SystemExit(main())
