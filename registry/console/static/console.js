// Reloads pages that ask for it (<body data-refresh="seconds">), unless the
// tab is hidden. The only script of the console; every page works without it.
(function () {
  "use strict";
  var s = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!(s > 0)) { return; }
  setInterval(function () {
    if (document.visibilityState === "visible") { window.location.reload(); }
  }, s * 1000);
})();
