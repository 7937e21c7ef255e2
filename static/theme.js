// Applies the saved theme before the first paint (loaded as a blocking script in <head>).
(function () {
  try {
    var t = localStorage.getItem('sessiond.theme');
    if (t === 'light' || t === 'dark') document.documentElement.setAttribute('data-theme', t);
  } catch (e) { /* storage unavailable: follow the system */ }
})();
