"""The review page: a server-rendered queue (Starlette + Jinja2) with accept / edit / reject forms and a JSON API.

Served on the loopback only, without accounts: a reviewer types their name once (kept in the browser), and every
decision carries it. web.guard.LocalGuard stands in front of every route: only this server's Host names, only its
own Origin, bounded bodies, and a decision only with the session token the page embeds (a hidden field in every
form, a <meta> for JSON callers), so another site's page, framed or DNS-rebound, cannot decide for the reviewer.
"""

from __future__ import annotations

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
from karma_dagster.kg.store import KGStore
from karma_dagster.review.marks import marked_html
from karma_dagster.review.models import DEFAULT_DAGSTER_URL, EDITABLE, SOURCES, DecisionIn, ReviewItem
from karma_dagster.review.queue import AlreadyDecided, ReviewError, ReviewQueue, UnknownItem
from karma_dagster.web.guard import TOKEN_FIELD, LocalGuard, new_token, own_hosts

HERE = Path(__file__).resolve().parent
FILTERS = ("source", "relation", "backbone", "min_score", "status")


def dagster_link(base: str, item: ReviewItem) -> str:
    """The item's asset partition in the Dagster UI: /assets/<key path>?view=partitions&partition=<key>."""
    path = "/".join(quote(part, safe="") for part in (item.backbone, item.stage))
    return f"{base.rstrip('/')}/assets/{path}?{urlencode({'view': 'partitions', 'partition': item.origin})}"


def _status(exc: ReviewError) -> int:
    return 404 if isinstance(exc, UnknownItem) else 409 if isinstance(exc, AlreadyDecided) else 422


def _validation_text(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'decision'}: {e['msg']}" for e in exc.errors())


def create_app(queue: ReviewQueue, *, dagster_url: str = DEFAULT_DAGSTER_URL, hosts: list[str] | None = None,
               token: str | None = None, port: int = 8766, kg: KGStore | None = None) -> Starlette:
    """The page; `hosts` are the Host header values it answers to (default: the loopback names with `port`),
    `token` the session's (default: a new random one, in `app.state.token`); with `kg`, the KG browser's pages
    (browse/routes.py: /kg...) behind the same guard."""
    token = token or new_token()
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["marked"] = lambda ev: marked_html(ev.text, ev.spans)
    templates.env.globals["dagster_link"] = lambda item: dagster_link(dagster_url, item)
    templates.env.globals.update(session_token=token, token_field=TOKEN_FIELD, kg_browser=kg is not None)

    def filters_of(request: Request) -> dict[str, str]:
        return {k: request.query_params[k] for k in FILTERS if request.query_params.get(k)}

    def listed(f: dict[str, str]) -> list:
        try:
            min_score = float(f["min_score"]) if f.get("min_score") else None
        except ValueError:
            raise ReviewError(f"min_score {f['min_score']!r} is not a number") from None
        return queue.items(source=f.get("source"), relation=f.get("relation"), backbone=f.get("backbone"),
                           min_score=min_score, status=f.get("status", "pending"))

    def page(request: Request, *, message: str = "", error: str = "", status: int = 200) -> Response:
        f = filters_of(request)
        try:
            rows = listed(f)
        except ReviewError as exc:
            rows, error, status = [], str(exc), 422
        return templates.TemplateResponse(request, "queue.html", {
            "rows": rows, "filters": f, "facets": queue.facets(), "sources": SOURCES, "editable": EDITABLE,
            "message": message or request.query_params.get("message", ""), "error": error,
            "query": urlencode(f)}, status_code=status)

    async def index(request: Request) -> Response:
        return page(request)

    async def decide_form(request: Request) -> Response:
        form = await request.form()
        item_id = request.path_params["item_id"]
        action = str(form.get("action", ""))
        edits = {k: str(form[k]) for k in EDITABLE if action == "edit" and form.get(k) is not None}
        try:
            decision = queue.decide(item_id, DecisionIn(action=action, reviewer=str(form.get("reviewer", "")),
                                                        edits=edits))
        except ValidationError as exc:
            return page(request, error=f"item {item_id}: {_validation_text(exc)}", status=422)
        except ReviewError as exc:
            return page(request, error=str(exc), status=_status(exc))
        verb = {"accept": "accepted", "edit": "edited and accepted", "reject": "rejected"}[decision.action]
        back = dict(filters_of(request), message=f"{verb} {queue.item(item_id).triple_text} ({decision.reviewer})")
        return RedirectResponse(f"/?{urlencode(back)}", status_code=303)

    async def api_items(request: Request) -> Response:
        try:
            rows = listed(filters_of(request))
        except ReviewError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        return JSONResponse([{"item": i.model_dump(mode="json"), "decision": d.model_dump(mode="json") if d else None,
                              "dagster": dagster_link(dagster_url, i)} for i, d in rows])

    async def api_decide(request: Request) -> Response:
        try:
            decision_in = DecisionIn.model_validate_json(await request.body())
            decision = queue.decide(request.path_params["item_id"], decision_in)
        except ValidationError as exc:
            return JSONResponse({"error": _validation_text(exc)}, status_code=422)
        except ReviewError as exc:
            return JSONResponse({"error": str(exc)}, status_code=_status(exc))
        return JSONResponse(decision.model_dump(mode="json"), status_code=201)

    app = Starlette(routes=[
        Route("/", index),
        Route("/items/{item_id}/decision", decide_form, methods=["POST"]),
        Route("/api/items", api_items),
        Route("/api/items/{item_id}/decision", api_decide, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        *(browse_routes(kg, dagster_url=dagster_url) if kg is not None else []),
    ], middleware=[Middleware(LocalGuard, hosts=hosts or own_hosts("127.0.0.1", port), token=token,
                              read_key=f"karma_review_{port}")])
    app.state.token = token
    return app
