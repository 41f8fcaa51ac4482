// neurarch-trace: the home page filter without JavaScript is CSS (:has() on the chosen options).
// This script only adds to it: the number of models shown, the choice kept in the address
// (?family=&size=&card=&gpus=&method=, so a filtered list can be shared), and filtering in browsers
// without :has(). It loads nothing and talks to no host.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  if (!form) { return; }
  var names = ["family", "size", "card", "gpus", "method"];
  // a GPU count accepts a row's token for it and for the smaller counts (listing.SUFFIXES)
  var suffixes = {"1": [""], "8": ["", "-8"], "n": ["", "-8", "-n"]};
  var rows = Array.prototype.slice.call(document.querySelectorAll("table.models tbody tr[data-family]"));
  var out = document.getElementById("f-count");
  var params = new URLSearchParams(window.location.search);
  names.forEach(function (name) {
    var wanted = params.get(name), select = form.elements[name];
    if (wanted === null || !select) { return; }
    for (var i = 0; i < select.options.length; i++) {
      if (select.options[i].value === wanted) { select.value = wanted; }
    }
  });
  function value(name) { return form.elements[name] ? form.elements[name].value : ""; }
  function apply(keepAddress) {
    var family = value("family"), size = value("size"), card = value("card"), method = value("method");
    var accepted = (suffixes[value("gpus")] || [""]).map(function (x) { return card + x; });
    var shown = 0;
    rows.forEach(function (row) {
      var fits = (row.getAttribute("data-" + method) || "").split(" ");
      var ok = (!family || row.getAttribute("data-family") === family) &&
               (!size || row.getAttribute("data-size") === size) &&
               (!card || accepted.some(function (t) { return fits.indexOf(t) >= 0; }));
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    out.textContent = shown + " of " + rows.length + " models shown";
    if (keepAddress) { return; }
    var query = new URLSearchParams();
    names.forEach(function (name) {
      var v = value(name);
      if (v && ((name !== "method" && name !== "gpus") || card)) { query.set(name, v); }
    });
    var text = query.toString();
    window.history.replaceState(null, "", text ? "?" + text : window.location.pathname);
  }
  form.addEventListener("change", function () { apply(false); });
  form.addEventListener("submit", function (event) { event.preventDefault(); apply(false); });
  apply(true);
})();
