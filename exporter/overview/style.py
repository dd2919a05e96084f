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
th{background:#f0f2f5;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;max-width:100%;height:auto}
code{font-size:12px;overflow-wrap:anywhere}
.nodata{color:#888;font-size:12px;margin:4px 0}
"""
