"""Where the repository's files are: $DFKV_SOURCE (the checkout's root, set
by scripts/test-contrib.sh, which runs a copy of these tests against the
installed package), else relative to this file in the checkout."""

import os


def repo_file(*parts):
    root = os.environ.get("DFKV_SOURCE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    return os.path.normpath(os.path.join(root, *parts))
