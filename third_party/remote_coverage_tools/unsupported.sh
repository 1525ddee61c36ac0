#!/bin/sh
echo "remote_coverage_tools: 'bazel coverage' is not supported in this offline workspace;" \
     "run the tests with .venv/bin/python -m pytest instead" >&2
exit 1
