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
