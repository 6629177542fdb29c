"""Package locks the tests share: three real pure-Python packages from the registry,
pinned (the lock ``build --with`` writes for them). The WASI guest that bundles them is
built once a test session (its cache), whichever module asks first."""

from __future__ import annotations

from steptrace.sandbox._packages import LOCK_HEADER, parse_lock

LOCK_TEXT = f"""{LOCK_HEADER}
more-itertools==10.5.0 --hash=sha256:037b0d3203ce90cca8ab1defbbdac29d5f993fc20131f3664dc8d6acfa872aef
sortedcontainers==2.4.0 --hash=sha256:a163dcaede0f1c021485e957a39245190e74249897e2ae4b2aa38595db237ee0
toolz==1.0.0 --hash=sha256:292c8f1c4e7516bf9086f8850935c799a874039c8bcf959d47b600e4c44a6236
"""
LOCK = parse_lock(LOCK_TEXT)
