"""`python -m deploy`: regenerate the derived manifests (see deploy/write.py)."""

from deploy.write import main

raise SystemExit(main())
