"""Unit tests: in-process checks of one module or function, seconds each (make test-fast)."""
