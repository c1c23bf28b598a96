// deepcli console: the live transcript (docs/console.md). Hand-written, no dependencies,
// served from the binary. New lines arrive as server-sent events and are added with
// textContent, never as HTML.
"use strict";
(function () {
  var list = document.getElementById("transcript");
  if (!list || !list.dataset.live || typeof EventSource === "undefined") {
    return;
  }
  var state = document.getElementById("live-state");
  var source = new EventSource(list.dataset.live);
  source.addEventListener("line", function (e) {
    var line;
    try {
      line = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    if (list.querySelector('li[data-id="' + String(line.id) + '"]')) {
      return;
    }
    var li = document.createElement("li");
    li.className = "line " + line.provenance + " from-" + line.senderKind + (line.gate ? " gated" : "");
    li.dataset.id = String(line.id);
    var who = document.createElement("span");
    who.className = "who";
    who.textContent = line.sender;
    var provenance = document.createElement("span");
    provenance.className = "provenance";
    provenance.textContent = line.provenance;
    var at = document.createElement("time");
    at.textContent = line.at;
    var text = document.createElement("div");
    text.className = "text";
    text.textContent = line.text;
    li.appendChild(who);
    li.appendChild(document.createTextNode(" "));
    li.appendChild(provenance);
    li.appendChild(document.createTextNode(" "));
    li.appendChild(at);
    li.appendChild(text);
    if (line.gate) {
      // A message the inbound policy kept from the agent: which gate, and what became of it.
      var gate = document.createElement("div");
      gate.className = "gate";
      var why = document.createElement("strong");
      why.textContent = line.gate;
      gate.appendChild(why);
      gate.appendChild(document.createTextNode(line.fate ? "; " + line.fate : ""));
      li.appendChild(gate);
    }
    list.appendChild(li);
  });
  source.addEventListener("open", function () {
    if (state) state.textContent = "Live: new lines appear as they are recorded.";
  });
  source.addEventListener("error", function () {
    if (state) state.textContent = "Live view interrupted; the browser reconnects on its own.";
  });
})();
