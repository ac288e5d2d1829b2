"""``python -m nri_plrm``: the ``nri-plrm`` command."""

import sys

from nri_plrm.cli import main

sys.exit(main())
