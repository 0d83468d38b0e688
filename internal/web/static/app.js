// Live updates: when keep reports a change, re-fetch this page and swap its
// main content; forms and links work without this script. A workflow's
// page refetches only for its own workflow's changes, at most once a
// second, and what it fetches is one page of its newest work (issue 44).
(function () {
  if (!window.EventSource) return;
  var pending = false;
  function refresh() {
    if (pending) return;
    pending = true;
    setTimeout(function () {
      fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.querySelector("main"), cur = document.querySelector("main");
        if (next && cur && !cur.contains(document.activeElement && document.activeElement.form ? document.activeElement : null)) {
          cur.replaceWith(next);
        }
      }).finally(function () { pending = false; });
    }, 1000);
  }
  var es = new EventSource("/events");
  var here = location.pathname.match(/^\/w\/([^\/]+)/);
  var mine = here ? decodeURIComponent(here[1]) : "";
  es.addEventListener("change", function (e) {
    if (mine && e.data && e.data !== mine) return;
    refresh();
  });
  // Changes made between rendering this page and opening the stream (for
  // example right after a button's redirect) would be missed: catch up once
  // the stream is open, and again whenever it reconnects.
  es.addEventListener("open", refresh);
})();
