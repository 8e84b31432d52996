// The page's own few lines: keep a followed log scrolled to its end (and the page's copy of
// it to its last ~1 MB of text; the download has all of it), and copy buttons.
"use strict";
const LOG_KEEP = 1 << 20;
document.addEventListener("DOMContentLoaded", () => {
  const log = document.getElementById("log-text");
  const follow = document.getElementById("follow");
  if (log && follow) {
    const update = () => {
      while (log.childNodes.length > 1 && log.textContent.length > LOG_KEEP) {
        log.removeChild(log.firstChild);
        document.getElementById("log-trimmed").hidden = false;
      }
      if (follow.checked) log.scrollTop = log.scrollHeight;
    };
    new MutationObserver(update).observe(log, { childList: true });
    follow.addEventListener("change", update);
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const source = document.querySelector(button.dataset.copy);
    const done = () => { button.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.textContent).then(done);
    } else {  // plain http on another host: select it for Ctrl-C
      window.getSelection().selectAllChildren(source);
      button.textContent = "Selected: press Ctrl-C";
    }
  });
});
