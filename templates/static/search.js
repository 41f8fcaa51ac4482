// neurarch-trace: the search page. It loads the Pagefind index that `make build` writes into this
// site (pagefind/, beside static/), so search works offline from public/ and talks to no other host.
// The index is split into shards (pagefind/, pagefind-1/, ...; generator/site/search.py says why);
// pagefind/shards.json lists them, and every shard after the first is merged into the first with
// Pagefind's mergeIndex, so one search covers them all. Results are built as text nodes: nothing
// from the index is parsed as HTML.
(function () {
  "use strict";
  var script = document.currentScript;
  var root = new URL("../", script ? script.src : window.location.href);
  var form = document.querySelector("form.search-page");
  var input = document.getElementById("search-q");
  var status = document.getElementById("search-status");
  var list = document.getElementById("search-results");
  var engine = null;
  var SHOWN = 30;

  function shards() {
    return fetch(new URL("pagefind/shards.json", root).href).then(function (response) {
      if (!response.ok) { throw new Error("no shard list"); }
      return response.json();
    }).then(function (list) { return list.shards; });
  }

  function load() {
    if (!engine) {
      // The first shard's pagefind.js and the shard list load side by side; the other shards merge in.
      engine = Promise.all([import(new URL("pagefind/pagefind.js", root).href), shards()]).then(function (got) {
        var pagefind = got[0];
        var others = got[1].slice(1);
        return pagefind.options({ baseUrl: root.pathname }).then(function () {
          return Promise.all(others.map(function (folder) {
            return pagefind.mergeIndex(new URL(folder, root).href, { baseUrl: root.pathname });
          }));
        }).then(function () { return pagefind; });
      });
    }
    return engine;
  }

  function show(query) {
    list.textContent = "";
    if (!query.trim()) { status.textContent = ""; return Promise.resolve(); }
    status.textContent = "Searching\u2026";
    return load().then(function (pagefind) {
      return pagefind.search(query);
    }).then(function (search) {
      var found = search.results;
      return Promise.all(found.slice(0, SHOWN).map(function (r) { return r.data(); })).then(function (pages) {
        pages.forEach(function (page) {
          var item = document.createElement("li");
          var link = document.createElement("a");
          link.href = page.url;
          link.textContent = (page.meta && page.meta.title) || page.url;
          item.appendChild(link);
          if (page.meta && page.meta.summary) {
            var summary = document.createElement("p");
            summary.textContent = page.meta.summary;
            item.appendChild(summary);
          }
          list.appendChild(item);
        });
        status.textContent = found.length + (found.length === 1 ? " result" : " results") + " for \u201c" +
          query + "\u201d" + (found.length > SHOWN ? ", the first " + SHOWN + " shown." : ".");
      });
    }).catch(function () {
      status.textContent = "The search index is missing from this build of the site.";
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var query = input.value;
    window.history.replaceState(null, "", query ? "?q=" + encodeURIComponent(query) : window.location.pathname);
    show(query);
  });
  var initial = new URLSearchParams(window.location.search).get("q") || "";
  input.value = initial;
  show(initial);
})();
