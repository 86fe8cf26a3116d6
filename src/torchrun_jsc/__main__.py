"""``python -m torchrun_jsc``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.argv[0] = "python -m torchrun_jsc"  # the program name torchrun's usage lines show
    main()
