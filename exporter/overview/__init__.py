"""What a person looks at: the live overview page (`/`, `/api/overview`) and the replay report.

Charts are server-rendered inline SVG (`svg.py`): no JavaScript, no CDN, nothing to vendor or
keep patched, a few hundred bytes a chart, and readable by any browser for as long as SVG is.
"""
