"""`zaroz-exporter replay --report FILE`: one self-contained HTML file about an incident's logs,
recorded during the same single pass that builds the exposition (`record.py`) and rendered at
the end (`render.py`)."""
