"""The Dagster UI at scale in a real browser (issue 33): a stage asset's page and its partition picker.

    python bench/scale.py --sizes 1000000 --per-doc 0 --daemon-docs 0 --no-daemon-pass --workdir W [--partitions date]
    python bench/ui_browser.py --workdir W [--asset local/segments] [--repeat 2]

Starts `dagster-webserver` over what bench/scale.py left in W (its SQLite instance in W/home and its code location
W/karma_location.py), then opens in Debian's chromium (playwright, headless, nothing leaves 127.0.0.1):
(1) the asset's page on its Partitions tab: seconds from navigation until the page shows the partition count;
(2) the asset's "Materialize" dialog: seconds from the click until its partition selection shows, then from a
    click on its "All" button until it counts every partition (the launch's partition picker).
Each is timed `--repeat` times (the first load pays the webserver's caches); a screenshot of each goes to
W/screens. Prints a table with the machine and its load. The UI's own GraphQL query alone is bench/scale.py's
"UI PartitionHealthQuery" row.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the browser harness lives with the tests
import browser_harness  # noqa: E402
from playwright.sync_api import Error as PlaywrightError  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min)"


def start_webserver(workdir: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    log = open(workdir / "webserver.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
         "-f", str(workdir / "karma_location.py"), "-d", str(workdir)],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def wait_ready(base: str, proc: subprocess.Popen, timeout_s: float = 300) -> float:
    import urllib.request

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"dagster-webserver exited ({proc.returncode}); see webserver.log in the workdir")
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=5) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"dagster-webserver did not answer within {timeout_s:.0f} s")


def count_pattern(n: int) -> re.Pattern:
    """The partition count as the UI may print it: 1,000,000 or 1000000."""
    return re.compile(rf"\b({n:,}|{n})\b")


# Dialogs on the way: the UI's first-visit newsletter prompt, and the launch's warning that upstream assets
# (the seed KG, the documents) are not materialized in the bench's instance.
INTERSTITIALS = {"Join the Dagster community": "Skip", "Are you sure?": "Confirm"}


# In the page: the button to click on an interstitial dialog, or "found" once `pattern` shows inside `within`.
_LOOK = """([within, pattern, interstitials]) => {
  for (const d of document.querySelectorAll('[role="dialog"]')) {
    for (const [title, button] of interstitials) if (d.innerText.includes(title)) return button;
  }
  const re = new RegExp(pattern);
  return [...document.querySelectorAll(within)].some(e => re.test(e.innerText)) ? "found" : null;
}"""


def time_until_text(page, pattern: re.Pattern, timeout_s: float, within: str = "body") -> float:
    """Seconds until `pattern` shows in an element matching the CSS selector `within` (INTERSTITIALS are answered
    when they come up). The wait runs in the page with a timeout kept by playwright, so a tab whose script is
    busy for minutes ends in TimeoutError instead of a hang."""
    t0 = time.perf_counter()
    while (left := timeout_s - (time.perf_counter() - t0)) > 0:
        try:
            handle = page.wait_for_function(_LOOK, arg=[within, pattern.pattern, list(INTERSTITIALS.items())],
                                            timeout=left * 1000, polling=100)
        except PlaywrightError:  # the timeout (or the page navigated meanwhile)
            continue
        answer = handle.json_value()
        if answer == "found":
            return time.perf_counter() - t0
        try:
            page.locator(f'[role="dialog"]:has-text("{next(t for t, b in INTERSTITIALS.items() if b == answer)}")') \
                .get_by_role("button", name=answer).first.click(timeout=2000)
        except PlaywrightError:  # re-rendered meanwhile: the next look finds it again
            pass
    raise TimeoutError(f"{pattern.pattern} not shown in {within} within {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True, help="a folder bench/scale.py --workdir left")
    ap.add_argument("--asset", default="local/segments")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each page")
    args = ap.parse_args(argv)
    workdir = args.workdir.resolve()
    if not (workdir / "karma_location.py").exists() or not (workdir / "home").is_dir():
        ap.error(f"{workdir}: no karma_location.py and home/ (run bench/scale.py --workdir there first)")
    sys.path.insert(0, str(REPO))
    import dagster as dg

    from karma_dagster.partitioning.definitions import documents_partitions, kg_dates_partitions

    with dg.DagsterInstance.from_ref(dg._core.instance.InstanceRef.from_dir(str(workdir / "home"))) as inst:  # type: ignore[attr-defined]
        n_docs = len(inst.get_dynamic_partitions(documents_partitions.name))
        n_dates = len(inst.get_dynamic_partitions(kg_dates_partitions.name))
    keys = n_docs or n_dates
    mode = "document" if n_docs else "date"
    print(f"machine at the start: {machine()}")
    print(f"{workdir.name}: {n_docs:,} document partitions, {n_dates:,} date partitions; the stage assets' "
          f"partitions: {keys:,} ({mode} mode)", flush=True)
    screens = workdir / "screens"
    screens.mkdir(exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_webserver(workdir, port)
    rows: list[tuple[str, str, str]] = []

    def row(what: str, seconds: float, note: str = "", page=None, shot: str = "") -> None:
        if page is not None:  # the tab's JS heap (chromium's performance.memory) and a screenshot, when it answers
            try:
                heap = page.wait_for_function("() => performance.memory.usedJSHeapSize", timeout=120_000).json_value()
                note += f"; JS heap {heap / 2**20:,.0f} MB"
                page.screenshot(path=str(screens / shot), timeout=120_000)
            except PlaywrightError as exc:
                note += f"; page unresponsive ({str(exc).splitlines()[0]})"
        rows.append((what, f"{seconds:.1f}", note))
        print(f"  {what}: {seconds:.1f} s {note}", flush=True)

    try:
        row("webserver up (code location loaded)", wait_ready(base, proc))
        from playwright.sync_api import sync_playwright

        pattern = count_pattern(keys)
        with sync_playwright() as pw:
            browser = browser_harness.launch(pw)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            for i in range(args.repeat):
                t0 = time.perf_counter()
                page.goto(f"{base}/assets/{args.asset}?view=partitions", wait_until="commit")
                try:
                    seconds = time_until_text(page, pattern, args.timeout)
                    note = "first load" if i == 0 else "again"
                except TimeoutError as exc:
                    seconds, note = time.perf_counter() - t0, f"NOT SHOWN: {exc}"
                row(f"asset page, Partitions tab ({args.asset})", seconds, note, page, f"asset-partitions-{i}.png")
                t0 = time.perf_counter()
                try:
                    page.locator("button", has_text="Materialize").first.click(timeout=args.timeout * 1000)
                except PlaywrightError as exc:
                    row("Materialize button", time.perf_counter() - t0, f"NOT CLICKABLE: {str(exc).splitlines()[0]}")
                    page.goto("about:blank")
                    continue
                dialog = '[role="dialog"]:has-text("Launch runs to materialize")'
                try:
                    seconds = time.perf_counter() - t0 + time_until_text(
                        page, re.compile("Partition selection"), args.timeout, '[role="dialog"]')
                    note = "until its partition selection shows"
                except TimeoutError as exc:
                    seconds, note = time.perf_counter() - t0, f"NOT SHOWN: {exc}"
                row("Materialize dialog opens", seconds, note)
                t0 = time.perf_counter()
                try:
                    page.locator(dialog).get_by_role("button", name="All", exact=True).first.click(timeout=10_000)
                    seconds = time.perf_counter() - t0 + time_until_text(page, pattern, args.timeout, '[role="dialog"]')
                    note = "its 'All' button: until the dialog counts every partition"
                except (TimeoutError, PlaywrightError) as exc:
                    seconds, note = time.perf_counter() - t0, f"NOT SHOWN: {str(exc).splitlines()[0]}"
                row("Materialize dialog: select all partitions", seconds, note, page, f"materialize-dialog-{i}.png")
                page.keyboard.press("Escape")
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"\n| {keys:,} {mode} partitions | seconds | notes |\n|---|---|---|")
    for what, seconds, note in rows:
        print(f"| {what} | {seconds} | {note} |")
    print(f"\nscreenshots in {screens}\nmachine at the end: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
