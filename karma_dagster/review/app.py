"""The review page: a server-rendered queue (Starlette + Jinja2) with accept / edit / reject forms and a JSON API.

Served on the loopback only, without accounts: a reviewer types their name once (kept in the browser), and every
decision carries it. web.guard.LocalGuard stands in front of every route: only this server's Host names, only its
own Origin, bounded bodies, reads only under /s/<read key>/ (the printed address; every link of the page keeps the
prefix, `root` in the templates), and a decision only with the decision token the page embeds (a hidden field in
every form, a <meta> for JSON callers), which differs from the read key; no cookie is ever set, so no other server
on the loopback receives either, and another site's page, framed or DNS-rebound, cannot decide for the reviewer.

A real day's inbox is hundreds of items: the page shows PAGE_SIZE of them (`?page=N`, best score first, then item
id, an order no decision moves) under counts per source and status, for the whole queue and the filters. The page's
script sends decisions to the JSON API, whose answer is the decision read back from the store and the item with
its edits applied: the card shows what was stored, not what the form held.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlencode

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from karma_dagster.browse.routes import browse_routes
from karma_dagster.ingest.papers import PaperLookup
from karma_dagster.kg.store import KGStore
from karma_dagster.review import accepting
from karma_dagster.review.marks import marked_html
from karma_dagster.review.models import (DEFAULT_DAGSTER_URL, EDITABLE, REVIEWER_MAX_CHARS, REVIEWER_MIN_CHARS,
                                         SOURCES, STATES, STATUSES, DecisionIn, ReviewItem)
from karma_dagster.review.queue import AlreadyDecided, ReviewError, ReviewQueue, UnknownItem, final_item
from karma_dagster.web.guard import TOKEN_FIELD, LocalGuard, own_hosts, session_keys

HERE = Path(__file__).resolve().parent
FILTERS = ("source", "relation", "backbone", "min_score", "status")
PAGE_SIZE, PAGE_SIZE_MAX = 50, 200  # a real day's inbox held 775 items (2.1 MB as one page); 50 are ~0.15 MB


class Paging(ValueError):
    """A page or page size that names no page: the request is refused (422), nothing is read."""


def paging(params: Mapping[str, str]) -> tuple[int, int]:
    """(page, per_page) from `?page=N&per_page=M`: 1-based, per_page within 1..PAGE_SIZE_MAX."""
    raw_page, raw_per = params.get("page") or "1", params.get("per_page") or str(PAGE_SIZE)
    page = int(raw_page) if raw_page.isascii() and raw_page.isdigit() and len(raw_page) < 10 else 0
    if page < 1:
        raise Paging(f"page {raw_page!r} is not a page number: pages are 1, 2, 3, ...")
    per = int(raw_per) if raw_per.isascii() and raw_per.isdigit() and len(raw_per) < 10 else 0
    if not 1 <= per <= PAGE_SIZE_MAX:
        raise Paging(f"per_page {raw_per!r}: show 1 to {PAGE_SIZE_MAX} items per page (default {PAGE_SIZE})")
    return page, per


def dagster_link(base: str, item: ReviewItem, by_date: bool = False) -> str:
    """The item's asset partition in the Dagster UI: /assets/<key path>?view=partitions&partition=<key>; with date
    partitions (`by_date`, partitioning/mode.py) a KARMA stage's partition is its document's date."""
    from karma_dagster.ingest.keys import date_of_document_key
    from karma_dagster.stages import STAGE_NAMES

    partition = date_of_document_key(item.origin) if by_date and item.stage in STAGE_NAMES else item.origin
    path = "/".join(quote(part, safe="") for part in (item.backbone, item.stage))
    return f"{base.rstrip('/')}/assets/{path}?{urlencode({'view': 'partitions', 'partition': partition})}"


def _status(exc: ReviewError) -> int:
    return 404 if isinstance(exc, UnknownItem) else 409 if isinstance(exc, AlreadyDecided) else 422


def _validation_text(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'decision'}: {e['msg']}" for e in exc.errors())


def root_of(request: Request) -> str:
    """The path prefix this request came in under (/s/<read key>, set by the guard): every link the page draws
    starts with it, so a plain link or form keeps the session without a cookie ("" for a token-header caller)."""
    return str(request.scope.get("root_path", ""))


def create_app(queue: ReviewQueue, *, dagster_url: str = DEFAULT_DAGSTER_URL, hosts: list[str] | None = None,
               port: int = 8766, kg: KGStore | None = None, by_date: bool = False,
               papers: PaperLookup | None = None) -> Starlette:
    """The page; `hosts` are the Host header values it answers to (default: the loopback names with `port`). Each
    app is a new session: `app.state.key` the read key (its pages live under /s/<key>/), `app.state.token` the
    decision token its pages embed (also what a script sends in the token header); with `kg`, the KG browser's
    pages (browse/routes.py: /kg...) behind the same guard."""
    key, token = session_keys()
    templates = Jinja2Templates(directory=str(HERE / "templates"),
                                context_processors=[lambda request: {"root": root_of(request)}])
    templates.env.filters["marked"] = lambda ev: marked_html(ev.text, ev.spans)
    templates.env.globals["dagster_link"] = lambda item: dagster_link(dagster_url, item, by_date)
    # the paper an item was read from, by title (ingest/papers.py); None: unknown to the catalog, or no paper
    templates.env.globals["paper_of"] = lambda key: (papers([key]).get(key) if papers is not None and key else None)
    templates.env.globals.update(session_token=token, token_field=TOKEN_FIELD, kg_browser=kg is not None)
    templates.env.globals.update(states=STATES, reviewer_min=REVIEWER_MIN_CHARS, reviewer_max=REVIEWER_MAX_CHARS,
                                 final_item=final_item, page_size=PAGE_SIZE)
    templates.env.filters["thousands"] = lambda n: f"{n:,}"
    # a schema-review / new-relation-type card's Accept offers the metaedges its kinds allow (review/accepting.py)
    templates.env.globals["accept_choices"] = lambda item: accepting.choices(item) if accepting.needs_choice(item) \
        else []
    templates.env.globals["schema_relation_names"] = set(accepting.rules.default_schema().relation_names)

    def filters_of(request: Request) -> dict[str, str]:
        return {k: request.query_params[k] for k in FILTERS if request.query_params.get(k)}

    def kept(request: Request) -> dict[str, str]:
        """The filters and the page: what every link and form of the page carries, so a decision returns there."""
        return {**filters_of(request), **{k: request.query_params[k] for k in ("page", "per_page")
                                          if request.query_params.get(k)}}

    def selection(f: dict[str, str]) -> dict:
        """The filters as the queue's arguments (all but status, which the counts break down instead)."""
        if f.get("status", "pending") not in STATUSES:
            raise ReviewError(f"status {f['status']!r}: use pending, decided or all")
        try:
            min_score = float(f["min_score"]) if f.get("min_score") else None
        except ValueError:
            raise ReviewError(f"min_score {f['min_score']!r} is not a number") from None
        return dict(source=f.get("source"), relation=f.get("relation"), backbone=f.get("backbone"),
                    min_score=min_score)

    def listed(f: dict[str, str], **page) -> list:
        return queue.items(**selection(f), status=f.get("status", "pending"), **page)

    def counters(f: dict[str, str]) -> dict[str, int]:
        """The page's counters by key: the whole queue, and the filters' selection (every status)."""
        return {**queue.counts().flat("whole", SOURCES), **queue.counts(**selection(f)).flat("filtered", SOURCES)}

    def page(request: Request, *, message: str = "", error: str = "", status: int = 200) -> Response:
        f = filters_of(request)
        rows, counts, pager = [], {}, None
        try:
            number, per = paging(request.query_params)
            counts = counters(f)
            total = counts[f"filtered:all:{f.get('status', 'pending')}"]
            last = max(1, -(-total // per))
            if number > last:  # past the end (e.g. its last items were just decided): the last page, said so
                message = message or f"page {number} is past the last page ({last}): showing page {last}"
                number = last
            rows = listed(f, limit=per, offset=(number - 1) * per)
            at = dict(f, **({"per_page": str(per)} if per != PAGE_SIZE else {}))
            pager = {"page": number, "last": last, "per_page": per, "total": total,
                     "first": (number - 1) * per + 1 if rows else 0, "upto": (number - 1) * per + len(rows),
                     "links": {n: f"{root_of(request)}/?" + urlencode(dict(at, page=str(n))) for n in
                               sorted({1, last, *range(max(1, number - 2), min(last, number + 2) + 1)})}}
        except (ReviewError, Paging) as exc:
            rows, error, status = [], str(exc), 422
        here = dict(f, **({"page": str(pager["page"])} if pager else {}),
                    **({"per_page": str(pager["per_page"])} if pager and pager["per_page"] != PAGE_SIZE else {}))
        return templates.TemplateResponse(request, "queue.html", {
            "rows": rows, "filters": f, "facets": queue.facets(), "sources": SOURCES, "editable": EDITABLE,
            "message": message or request.query_params.get("message", ""), "error": error, "counts": counts,
            "pager": pager, "query": urlencode(here)}, status_code=status)

    async def index(request: Request) -> Response:
        return page(request)

    async def decide_form(request: Request) -> Response:
        form = await request.form()
        item_id = request.path_params["item_id"]
        action = str(form.get("action", ""))
        edits = {k: str(form[k]) for k in EDITABLE if action == "edit" and form.get(k) is not None}
        try:
            decision = queue.decide(item_id, DecisionIn(action=action, reviewer=str(form.get("reviewer", "")),
                                                        edits=edits, choice=str(form.get("choice", "")) if
                                                        action == "accept" else ""))
        except ValidationError as exc:
            return page(request, error=f"item {item_id}: {_validation_text(exc)}", status=422)
        except ReviewError as exc:
            return page(request, error=str(exc), status=_status(exc))
        verb = {"accept": "accepted", "edit": "edited and accepted", "reject": "rejected"}[decision.action]
        stored = final_item(queue.item(item_id), decision)  # as decided: the edited triple, not the proposed one
        back = dict(kept(request), message=f"{verb} {stored.triple_text} ({decision.reviewer})")
        return RedirectResponse(f"{root_of(request)}/?{urlencode(back)}", status_code=303)

    async def api_items(request: Request) -> Response:
        """Every item under the filters, or with `page` (and `per_page`) one page of them."""
        try:
            paged = "page" in request.query_params or "per_page" in request.query_params
            number, per = paging(request.query_params)
            rows = listed(filters_of(request), **({"limit": per, "offset": (number - 1) * per} if paged else {}))
        except (ReviewError, Paging) as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        return JSONResponse([{"item": i.model_dump(mode="json"), "decision": d.model_dump(mode="json") if d else None,
                              "dagster": dagster_link(dagster_url, i, by_date)} for i, d in rows])

    async def api_decide(request: Request) -> Response:
        try:
            decision_in = DecisionIn.model_validate_json(await request.body())
            item_id = request.path_params["item_id"]
            queue.decide(item_id, decision_in)
        except ValidationError as exc:
            return JSONResponse({"error": _validation_text(exc)}, status_code=422)
        except ReviewError as exc:
            return JSONResponse({"error": str(exc)}, status_code=_status(exc))
        # the row as the store holds it, read back: the page renders its confirmation from this, not from the form
        stored = queue.decision(item_id)
        try:
            counts = counters(filters_of(request))  # the page's filters ride on the query: its counters refresh
        except ReviewError:
            counts = {}
        return JSONResponse({"decision": stored.model_dump(mode="json"),
                             "item": final_item(queue.item(item_id), stored).model_dump(mode="json"),
                             "counts": counts}, status_code=201)

    app = Starlette(routes=[
        Route("/", index),
        Route("/items/{item_id}/decision", decide_form, methods=["POST"]),
        Route("/api/items", api_items),
        Route("/api/items/{item_id}/decision", api_decide, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        *(browse_routes(kg, dagster_url=dagster_url, papers=papers) if kg is not None else []),
    ], middleware=[Middleware(LocalGuard, hosts=hosts or own_hosts("127.0.0.1", port), token=token, read_key=key)])
    app.state.key, app.state.token = key, token
    return app
