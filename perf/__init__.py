"""The performance regression suite: a pytest plugin (plugin.py, options.py, machine.py) and benchmark modules.
Run with ``pytest perf``; ``pytest --help`` lists the ``--perf-*`` options under "perf suite"."""
