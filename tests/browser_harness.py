"""A real headless browser for the web pages' tests: Debian's chromium driven by playwright (no download)."""

from __future__ import annotations

from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # nothing reaches the network


def launch(playwright: Any) -> Any:
    """A chromium browser from a `sync_playwright()` context."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
