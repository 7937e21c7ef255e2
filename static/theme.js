// Sets <html data-theme> before the first paint: the saved choice, else the system's, followed
// live. The stylesheet keys its colours on that attribute only. The app announces a new choice
// with a `sessiond-theme` event (detail: light, dark or system) on document.
(function () {
  var media = window.matchMedia('(prefers-color-scheme: dark)');
  function saved() {
    try {
      var t = localStorage.getItem('sessiond.theme');
      return t === 'light' || t === 'dark' ? t : null;
    } catch (e) {
      return null; // storage unavailable: follow the system
    }
  }
  var chosen = saved();
  function apply() {
    document.documentElement.setAttribute('data-theme', chosen || (media.matches ? 'dark' : 'light'));
  }
  apply();
  if (media.addEventListener) media.addEventListener('change', apply);
  document.addEventListener('sessiond-theme', function (e) {
    chosen = e.detail === 'light' || e.detail === 'dark' ? e.detail : null;
    apply();
  });
})();
