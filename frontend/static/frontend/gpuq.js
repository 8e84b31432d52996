// The page's own few lines: keep a followed log scrolled to its end (and the page's copy of
// it to its last ~1 MB of text; the download has all of it), copy buttons, and show an error
// answer that names its swap.
"use strict";
const LOG_KEEP = 1 << 20;
// htmx swaps no 4xx; an answer that names its swap (HX-Reswap: a stale form's "Nothing was
// changed", common.csrf_failure) is meant to be shown.
document.addEventListener("htmx:beforeSwap", (event) => {
  const xhr = event.detail.xhr;
  if (xhr.status >= 400 && xhr.getResponseHeader("HX-Reswap")) event.detail.shouldSwap = true;
});
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
