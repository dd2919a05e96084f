"""`python -m deploy`: regenerate the derived manifests (see deploy/generate.py)."""

from deploy.generate import main

raise SystemExit(main())
