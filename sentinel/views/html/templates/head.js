window.onerror = function (msg) { document.documentElement.dataset.error = String(msg); };
