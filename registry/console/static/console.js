// The only script of the console; every page works without it.
// - Reloads pages that ask for it (<body data-refresh="seconds">), unless
//   the tab is hidden.
// - Copy buttons (<button class="copy" data-copy="...">) put their value on
//   the clipboard; without the script they stay hidden (the value is in the
//   page, and in the title on hover).
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("button.copy") : null;
    if (!b) { return; }
    var v = b.getAttribute("data-copy") || "";
    var done = function () { b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1500); };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(v).then(done, function () { b.textContent = "select it"; });
    }
  });
  var s = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!(s > 0)) { return; }
  setInterval(function () {
    if (document.visibilityState === "visible") { window.location.reload(); }
  }, s * 1000);
})();
