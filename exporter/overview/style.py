"""The one stylesheet of the overview page and the replay report (inline: nothing to fetch)."""

CSS = """
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;
background:#f4f5f7}
header{background:#1f2937;color:#fff;padding:10px 20px;display:flex;flex-wrap:wrap;gap:6px 24px;
align-items:baseline}
header h1{font-size:18px;margin:0}
header a{color:#cfe3ff}
main{padding:12px 20px;max-width:1600px}
h2{font-size:16px;margin:18px 0 8px}
.muted{color:#666}
.ok{color:#067d3f}.bad{color:#b42318}
.health{display:flex;flex-wrap:wrap;gap:8px}
.health div{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 10px;
min-width:150px}
.health b{display:block;font-size:16px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 12px;min-width:0}
.card h3{margin:0 0 4px;font-size:15px;overflow-wrap:anywhere}
.m{border-top:1px solid #eee;padding-top:6px;margin-top:6px}
.m .q{display:flex;flex-wrap:wrap;gap:2px 12px;font-variant-numeric:tabular-nums}
.m .q span{white-space:nowrap}
.legend{display:flex;flex-wrap:wrap;gap:2px 10px;font-size:12px}
.legend i{display:inline-block;width:9px;height:9px;margin-right:3px;border-radius:2px}
.badges{display:flex;flex-wrap:wrap;gap:4px}
.badge{font-size:12px;border-radius:10px;padding:1px 8px;background:#eef2f6;white-space:nowrap}
.badge.hot{background:#fde8e7;color:#b42318}
table{border-collapse:collapse;background:#fff;width:100%;table-layout:fixed}
th,td{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;overflow-wrap:anywhere;
vertical-align:top}
th{background:#f0f2f5;font-weight:600;overflow-wrap:normal}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;max-width:100%;height:auto}
svg.hist,svg.stack{width:100%}
code{font-size:12px;overflow-wrap:anywhere}
.nodata{color:#888;font-size:12px;margin:4px 0}
"""

# A small bar-chart icon, inline (no /favicon.ico request, so no 404 in the console).
ICON = ("<link rel=\"icon\" href=\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' "
        "viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%231f2937'/%3E"
        "%3Crect x='3' y='8' width='2' height='5' fill='%2356B4E9'/%3E%3Crect x='7' y='4' "
        "width='2' height='9' fill='%2356B4E9'/%3E%3Crect x='11' y='6' width='2' height='7' "
        "fill='%23E69F00'/%3E%3C/svg%3E\">")
