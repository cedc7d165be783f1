"""The HTML page's inline style and script (no network: nothing is fetched)."""

CSS = """
:root { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; }
body { margin: 0 auto; max-width: 1200px; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 4px 0 8px; } h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 0; display: inline; } code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
.muted { color: #656d76; } .small { font-size: 12.5px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px; font-weight: 600; }
.verdict-line { font-size: 17px; } .verdict-line .badge { font-size: 15px; padding: 2px 10px; }
.panel { border: 1px solid #d0d7de; border-left: 5px solid var(--c); border-radius: 6px; margin: 12px 0; padding: 10px 14px; }
.panel > summary { cursor: pointer; list-style: none; } .panel > summary::-webkit-details-marker { display: none; }
.panel > summary::before { content: "\\25B8  "; color: #656d76; } .panel[open] > summary::before { content: "\\25BE  "; }
.inv { margin: 10px 0 4px; } .inv .family { font-weight: 600; }
.grids { display: flex; flex-wrap: wrap; gap: 18px; margin: 6px 0 10px; }
.grid-wrap { overflow-x: auto; max-width: 100%; } .grid-title { font-size: 12.5px; margin-bottom: 3px; }
table.heatmap { border-collapse: separate; border-spacing: 2px; font-size: 12px; }
table.heatmap th { font-weight: 500; color: #656d76; padding: 0 4px; }
table.heatmap td { min-width: 46px; height: 28px; text-align: center; border-radius: 3px; padding: 0 4px;
  font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
table.heatmap td.masked { background: repeating-linear-gradient(45deg, #e6e8eb, #e6e8eb 4px, #d4d7db 4px, #d4d7db 8px) !important;
  color: #8c959f !important; }
table.heatmap td.bad { outline: 3px solid #1f2328; outline-offset: -1px; font-weight: 700; }
table.heatmap td.gap { background: none; color: #8c959f; min-width: 12px; }
.legend { font-size: 12px; color: #656d76; } .legend span.sw { display: inline-block; width: 14px; height: 12px; vertical-align: -2px; margin: 0 3px 0 10px; border-radius: 2px; }
table.list { border-collapse: collapse; font-size: 13px; } table.list td, table.list th { border-bottom: 1px solid #eaeef2; padding: 3px 10px 3px 0; text-align: left; }
pre { background: #f6f8fa; padding: 8px; border-radius: 6px; overflow-x: auto; font-size: 12px; }
.toolbar { margin: 12px 0; } .toolbar input { padding: 4px 8px; width: 260px; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #1f2328; }
"""

# window.onerror is set first, in <head>: any script error marks the page (data-error).
HEAD_JS = """window.onerror = function (msg) { document.documentElement.dataset.error = String(msg); };"""
JS = """
(function () {
  var box = document.getElementById('filter');
  if (box) box.addEventListener('input', function () {
    var q = box.value.toLowerCase();
    document.querySelectorAll('.panel').forEach(function (p) {
      p.style.display = (p.dataset.search || '').indexOf(q) >= 0 ? '' : 'none';
      if (q && p.style.display === '') p.open = true;
    });
  });
  document.querySelectorAll('table.heatmap td[data-o]').forEach(function (td) {
    td.title = td.dataset.o;
  });
  document.body.dataset.ok = '1';
})();
"""
