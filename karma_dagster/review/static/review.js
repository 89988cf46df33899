// Keyboard review: j/k select the next/previous item, a accept, r reject, e edit. A key is a shortcut only when
// focus is not in a field: typing a name (or an edit) types, and no decision happens. A decision needs the
// reviewer's name (kept in this browser): without one it is refused here, visibly, before anything is sent (the
// server refuses it too). Decisions go to the JSON API; the card then shows the decision as the server stored it
// (its response carries the stored row and the item with the edits applied), and the counters refresh.
(function () {
  const reviewer = document.getElementById("reviewer");
  const needed = document.getElementById("reviewer-needed");
  const token = document.querySelector("meta[name=karma-token]").content;
  const root = document.querySelector("meta[name=karma-root]").content;  // /s/<read key>: no cookie carries it
  reviewer.value = localStorage.getItem("karma-reviewer") || "";
  reviewer.addEventListener("change", () => localStorage.setItem("karma-reviewer", reviewer.value.trim()));
  reviewer.addEventListener("input", () => {
    if (reviewer.value.trim().length >= reviewer.minLength) {
      needed.hidden = true;
      reviewer.classList.remove("missing");
    }
  });

  const items = Array.from(document.querySelectorAll("article.item"));
  let current = -1;
  function select(i) {
    if (!items.length) return;
    current = Math.max(0, Math.min(items.length - 1, i));
    items.forEach((el, k) => el.classList.toggle("selected", k === current));
    items[current].scrollIntoView({ block: "nearest" });
    items[current].focus({ preventScroll: true });
  }
  items.forEach((el, k) => el.addEventListener("click", (event) => {
    if (!isField(event.target)) select(k);
  }));

  function isField(el) {
    const fields = "input, textarea, select, [contenteditable]:not([contenteditable=false])";
    return !!(el && el.closest && el.closest(fields));
  }

  function name() {
    const value = reviewer.value.trim();
    if (value.length >= reviewer.minLength) return value;
    needed.hidden = false;  // refused before anything is sent: say why, and where to type
    reviewer.classList.add("missing");
    reviewer.focus();
    return null;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // the card as stored: the triple with the edits applied, who decided and when, what was edited
  function showStored(card, body) {
    const d = body.decision, item = body.item;
    card.querySelector(".triple .head").textContent = item.head_name;
    card.querySelector(".triple .relation").textContent = "-" + item.relation + "->";
    card.querySelector(".triple .tail").textContent = item.tail_name;
    const change = card.querySelector("p.change");
    if (change && d.action !== "accept") change.remove();  // it described the proposed triple, not the stored one
    else if (change) change.firstElementChild.textContent = "Accepted:";
    let text = d.action + " by " + d.reviewer + " at " + d.decided_at.replace("T", " ") + " UTC";
    const edits = Object.entries(d.edits || {}).map(([f, ch]) => f + " " + ch[0] + " → " + ch[1]);
    if (edits.length) text += " · edited: " + edits.join(", ");
    if (d.action !== "reject") text += " · not merged yet";
    const line = el("p", "decided decided-" + d.action, text);
    line.setAttribute("role", "status");
    card.querySelector(".actions").replaceWith(line);
    card.querySelector(".card-error").hidden = true;
    card.classList.add("done");
    for (const [key, n] of Object.entries(body.counts || {})) {
      document.querySelectorAll('[data-count="' + key + '"]').forEach((c) => {
        c.textContent = n.toLocaleString("en-US");
      });
    }
    const verb = { accept: "accepted", edit: "edited and accepted", reject: "rejected" }[d.action];
    let message = document.querySelector("p.message");
    if (!message) {
      message = el("p", "message");
      message.setAttribute("role", "status");
      document.getElementById("queue").before(message);
    }
    message.textContent = verb + " " + item.head_name + " -" + item.relation + "-> " + item.tail_name +
      " (" + d.reviewer + ")";
  }

  async function decide(form) {
    const who = name();
    if (!who) return;
    localStorage.setItem("karma-reviewer", who);
    const card = form.closest("article.item");
    const action = form.querySelector("input[name=action]").value;
    const picked = form.querySelector("select[name=choice]");  // what Accept does with a schema-review triple
    const choice = action === "accept" && picked ? picked.value : "";
    const edits = {};
    if (action === "edit") {
      form.querySelectorAll("input:not([type=hidden])").forEach((input) => { edits[input.name] = input.value; });
    }
    const problem = card.querySelector(".card-error");
    form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      const url = root + "/api/items/" + encodeURIComponent(card.dataset.id) + "/decision" + location.search;
      const response = await fetch(url, {
        method: "POST", headers: { "content-type": "application/json", "x-karma-token": token },
        body: JSON.stringify(Object.assign({ action: action, reviewer: who, edits: edits }, choice ? { choice: choice } : {})),
      });
      const body = await response.json().catch(() => ({ error: "the server answered " + response.status }));
      if (!response.ok) throw new Error(body.error || ("the server answered " + response.status));
      showStored(card, body);
      const next = items.findIndex((c, k) => k > items.indexOf(card) && !c.classList.contains("done"));
      if (next >= 0) select(next);
    } catch (err) {
      problem.textContent = err.message;
      problem.hidden = false;
      form.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    }
  }

  document.querySelectorAll("form.decide").forEach((form) => {
    form.addEventListener("submit", (event) => {
      event.preventDefault();  // sent as JSON: the card renders the stored row without leaving the page
      decide(form);
    });
  });

  function submit(kind) {
    if (current < 0) return;
    const form = items[current].querySelector("form.decide." + kind);
    if (form) form.requestSubmit();
  }

  function edit() {
    if (current < 0) return;
    const details = items[current].querySelector("details.edit");
    if (!details) return;
    details.open = true;
    details.querySelector("input:not([type=hidden])").focus();
  }

  const keys = { j: () => select(current + 1), k: () => select(current - 1), a: () => submit("accept"),
                 r: () => submit("reject"), e: edit };
  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.isComposing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (isField(event.target) || isField(document.activeElement)) return;  // typing: the key is the field's
    const act = Object.prototype.hasOwnProperty.call(keys, event.key) ? keys[event.key] : null;
    if (!act) return;
    event.preventDefault();  // acting: the key must not also land in a field the action focuses (the name, an edit)
    act();
  });

  if (items.length) select(0);
})();
