"""``python -m detector``: the same command line as the ``detector`` console script (:func:`detector.cli.main`)."""

import sys

from detector.cli import main

sys.exit(main())
