"""``python -m torchrun_jsc.readme``: print the README of the installed version, offline.

The README is the package's long description, so it is installed with the package's metadata;
compute nodes often have no internet. The docs/ pages it links to are online only.
"""

from __future__ import annotations

import sys
from importlib import metadata


def text() -> str:
    """The README as the installed package's metadata holds it (its body after the headers):
    ``METADATA`` of a wheel's install, ``PKG-INFO`` of an ``egg-info`` folder."""
    dist = metadata.distribution("torchrun_jsc")
    raw = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    _, _, body = raw.replace("\r\n", "\n").partition("\n\n")
    return body


def main() -> None:
    """Print :func:`text`; without installed metadata (a bare source tree), say so."""
    try:
        body = text()
    except metadata.PackageNotFoundError:
        print(
            "torchrun_jsc: no installed package metadata to read the README from; in a source"
            " tree, read README.md",
            file=sys.stderr,
        )
        sys.exit(1)
    print(body.rstrip("\n"))


if __name__ == "__main__":
    main()
