"""``python -m bench.quality`` — see ``bench/quality/run.py``."""

from .run import main

raise SystemExit(main())
