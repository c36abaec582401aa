import sys

from continual_lsp.cli import main

sys.exit(main())
