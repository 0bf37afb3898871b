// dynmig's live slice-map page: replace the fleet section with each fragment the server sends.
// The fragment is HTML the server escaped; it is parsed inert (DOMParser runs no script) and the
// Content-Security-Policy allows no inline script either way.
"use strict";
(function () {
  const fleet = document.getElementById("fleet");
  const live = document.getElementById("live");
  let source = null;

  function say(text, state) {
    live.textContent = text;
    live.dataset.state = state;
  }

  function connect() {
    source = new EventSource("events");
    source.addEventListener("open", function () {
      say("live", "live");
    });
    source.addEventListener("fleet", function (message) {
      const doc = new DOMParser().parseFromString(message.data, "text/html");
      fleet.replaceChildren(...doc.body.childNodes);
      say("live, updated " + new Date().toLocaleTimeString(), "live");
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) {
        // refused (e.g. too many watchers): the browser does not retry by itself
        say("disconnected; retrying in 10 s", "down");
        source = null;
        window.setTimeout(connect, 10000);
      } else {
        say("reconnecting…", "down");
      }
    });
  }

  connect();
})();
