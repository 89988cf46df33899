// Keyboard review: j/k select the next/previous item, a accept, r reject, e edit; the reviewer's name is kept
// in this browser and copied into every decision form (the server refuses a decision without one).
(function () {
  const reviewer = document.getElementById("reviewer");
  reviewer.value = localStorage.getItem("karma-reviewer") || "";
  reviewer.addEventListener("change", () => localStorage.setItem("karma-reviewer", reviewer.value.trim()));

  const items = Array.from(document.querySelectorAll("article.item"));
  let current = -1;
  function select(i) {
    if (!items.length) return;
    current = Math.max(0, Math.min(items.length - 1, i));
    items.forEach((el, k) => el.classList.toggle("selected", k === current));
    items[current].scrollIntoView({ block: "nearest" });
    items[current].focus({ preventScroll: true });
  }
  items.forEach((el, k) => el.addEventListener("click", () => select(k)));

  document.querySelectorAll("form.decide").forEach((form) => {
    form.addEventListener("submit", (event) => {
      const name = reviewer.value.trim();
      if (!name) {
        event.preventDefault();
        reviewer.focus();
        reviewer.classList.add("missing");
        return;
      }
      localStorage.setItem("karma-reviewer", name);
      form.querySelector("input[name=reviewer]").value = name;
    });
  });

  function submit(kind) {
    if (current < 0) return;
    const form = items[current].querySelector("form.decide." + kind);
    if (form) form.requestSubmit();
  }

  document.addEventListener("keydown", (event) => {
    const tag = (event.target.tagName || "").toLowerCase();
    if (["input", "textarea", "select"].includes(tag) || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "j") select(current + 1);
    else if (event.key === "k") select(current - 1);
    else if (event.key === "a") submit("accept");
    else if (event.key === "r") submit("reject");
    else if (event.key === "e" && current >= 0) {
      const details = items[current].querySelector("details.edit");
      if (details) {
        details.open = true;
        event.preventDefault();
        details.querySelector("input:not([type=hidden])").focus();
      }
    } else return;
  });

  if (items.length) select(0);
})();
