// factledger console: the few behaviours plain HTML lacks. No framework.
// - [data-refresh="URL"]: every second, replace the element's content with the HTML
//   fragment URL answers, until the fragment carries data-final.
// - [data-autosubmit]: a form submits itself when one of its inputs changes (the
//   as-of slider).
// - input[type=range][data-show]: shows its value in the element with that id.
(function () {
  function refresh(el) {
    var url = el.getAttribute("data-refresh");
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        el.innerHTML = html;
        if (!el.querySelector("[data-final]")) { setTimeout(function () { refresh(el); }, 1000); }
      })
      .catch(function () { setTimeout(function () { refresh(el); }, 2000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      if (!el.querySelector("[data-final]")) { setTimeout(function () { refresh(el); }, 1000); }
    });
    document.querySelectorAll("form[data-autosubmit]").forEach(function (f) {
      f.addEventListener("change", function () { f.submit(); });
    });
    document.querySelectorAll("input[type=range][data-show]").forEach(function (r) {
      var out = document.getElementById(r.getAttribute("data-show"));
      r.addEventListener("input", function () { if (out) { out.textContent = r.value; } });
    });
  });
})();
