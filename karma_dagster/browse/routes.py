"""The browser's pages, mounted by the review app (review/app.py) so one server and one LocalGuard serve both.

Every page takes `backbone` (the KG namespace; default `local`) and `as_of` (YYYY-MM-DD; default: everything) as
query parameters and carries them in every link it draws, so a person moves through one graph as of one date.
Entity ids hold ':' and may hold '/', so they travel percent-encoded in the path ({id:path}) or as query values.
Nothing here writes: every route is a GET, and the pages embed neither script nor style (the guard's CSP).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from pathlib import Path
from urllib.parse import quote, urlencode

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from karma_dagster.browse import queries
from karma_dagster.browse.layout import neighbourhood_svg
from karma_dagster.browse.search import SearchIndex, search_index
from karma_dagster.ingest.papers import PaperInfo, PaperLookup
from karma_dagster.kg.store import DEFAULT_NAMESPACE, KGStore
from karma_dagster.review.marks import marked_html
from karma_dagster.review.models import Span

HERE = Path(__file__).resolve().parent
EVIDENCE_STAGE = "evaluated"  # the chain's asset whose document partition holds the triples a merge took in
MIN_MARK_CHARS = 4  # shorter synonyms (ER, Era) would mark ordinary words


class BadInput(ValueError):
    """A query parameter the page cannot use (422), or a backbone without a KG namespace (404)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def word_spans(text: str, names: list[tuple[str, str]]) -> list[Span]:
    """Whole-word, case-insensitive occurrences of each (name, label), longest first, never overlapping."""
    taken: list[Span] = []
    for name, label in sorted({(n.strip(), lab) for n, lab in names if n.strip()}, key=lambda x: (-len(x[0]), x)):
        for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text, flags=re.IGNORECASE):
            if all(m.end() <= s.start or m.start() >= s.end for s in taken):
                taken.append(Span(start=m.start(), end=m.end(), label=label))
    return sorted(taken, key=lambda s: s.start)


def paper_html(key: str, info: PaperInfo | None, href: str) -> Markup:
    """A paper as people name it (title, first author, journal, date) with its key one click away (`href`: the
    document in Dagster); the key alone when the catalog does not know it."""
    link = Markup('<a class="doc" href="{}">{}</a>').format(href, key)
    if info is None or not info.title:
        return link
    return Markup('<span class="paper"><cite>{}</cite> <small class="byline">{}</small> <small>{}</small></span>'
                  ).format(info.short_title, info.byline, link)


def browse_routes(store: KGStore, *, dagster_url: str, papers: PaperLookup | None = None) -> list[Route | Mount]:
    """The /kg pages over `store` (DuckDB file or PostgreSQL: kg_store(data)); `papers` names the documents by
    title, author, journal and date (ingest/papers.py; without it, by key)."""
    templates = Jinja2Templates(directory=str(HERE / "templates"),
                                context_processors=[lambda request: {"root": _root(request)}])
    if store.exists():  # the search index (vocabularies read: ~1 s) is built while the first page loads, not after
        threading.Thread(target=search_index, args=(store,), name="kg-search-index", daemon=True).start()

    def context(request: Request) -> dict:
        """backbone and as_of of the request, checked: (namespace, as_of, the known namespaces)."""
        known = queries.namespaces(store)
        if not known:
            raise BadInput("no KG yet in this data folder: `karma import-kg` or `karma run` makes one", 404)
        backbone = request.query_params.get("backbone", "").strip() or (
            DEFAULT_NAMESPACE if DEFAULT_NAMESPACE in known else known[0])
        if backbone not in known:
            raise BadInput(f"backbone {backbone!r} has no KG namespace (known: {', '.join(known)})", 404)
        raw = request.query_params.get("as_of", "").strip()
        try:
            as_of = dt.date.fromisoformat(raw) if raw else None
        except ValueError:
            raise BadInput(f"as_of {raw!r} is not a date (YYYY-MM-DD)") from None
        return {"backbone": backbone, "as_of": as_of, "backbones": known, "root": _root(request)}

    def links(ctx: dict) -> dict:
        keep = {"backbone": ctx["backbone"], **({"as_of": ctx["as_of"].isoformat()} if ctx["as_of"] else {})}
        root = ctx["root"]  # /s/<read key>: every link keeps the session (web/guard.py), no cookie does

        def entity_url(node_id: str) -> str:
            return f"{root}/kg/entity/{quote(node_id, safe='')}?{urlencode(keep)}"

        def edge_url(head: str, relation: str, tail: str) -> str:
            return f"{root}/kg/edge?{urlencode({'head': head, 'relation': relation, 'tail': tail, **keep})}"

        def svg_url(node_id: str) -> str:
            return f"{root}/kg/neighbourhood/{quote(node_id, safe='')}?{urlencode(keep)}"

        def doc_url(doc_key: str) -> str:
            path = "/".join(quote(p, safe="") for p in (ctx["backbone"], EVIDENCE_STAGE))
            return (f"{dagster_url.rstrip('/')}/assets/{path}?"
                    f"{urlencode({'view': 'partitions', 'partition': doc_key})}")

        def page_url(path: str, **params: str) -> str:
            return f"{root}{path}?{urlencode({**keep, **params})}"

        known: dict[str, PaperInfo | None] = {}  # one page's papers, each looked up once

        def paper(doc_key: str) -> Markup:
            if doc_key not in known:
                known.update((papers or (lambda keys: {}))([doc_key]) or {doc_key: None})
            return paper_html(doc_key, known.get(doc_key), doc_url(doc_key))

        return {"entity_url": entity_url, "edge_url": edge_url, "svg_url": svg_url, "doc_url": doc_url,
                "page_url": page_url, "keep": keep, "paper": paper}

    def render(request: Request, name: str, ctx: dict, status: int = 200, **values: object) -> Response:
        return templates.TemplateResponse(request, name, {**ctx, **links(ctx), **values}, status_code=status)

    def failed(request: Request, exc: Exception, status: int) -> Response:
        ctx = {"backbone": request.query_params.get("backbone", ""), "as_of": None, "backbones": [],
               "root": _root(request)}
        try:
            ctx = context(request)
        except BadInput:
            pass
        return render(request, "kg_error.html", ctx, status=status, error=str(exc))

    def guarded(handler):  # noqa: ANN001, ANN202 - a route body -> a route body answering bad input with a page
        def endpoint(request: Request) -> Response:  # sync: Starlette runs it in its thread pool, off the loop
            try:
                if not store.exists():
                    raise BadInput("no KG yet in this data folder: `karma import-kg` or `karma run` makes one", 404)
                # the index first, outside the connection: a build under way elsewhere is waited for holding no
                # KG lock (the build reads the KG: waiting for it inside the connection would deadlock)
                index = search_index(store)
                with store.connect(read_only=True):  # one connection (one snapshot) for every query of the page
                    return handler(request, index)
            except BadInput as exc:
                return failed(request, exc, exc.status)
            except queries.BrowseError as exc:
                return failed(request, exc, 404)
        return endpoint

    @guarded
    def search_page(request: Request, index: SearchIndex) -> Response:
        ctx = context(request)
        q = request.query_params.get("q", "").strip()
        if len(q) > 200:
            raise BadInput(f"search text of {len(q)} characters: at most 200")
        hits = index.search(store, q, ctx["backbone"], ctx["as_of"]) if q else []
        return render(request, "kg_search.html", ctx, q=q, hits=hits)

    @guarded
    def entity_page(request: Request, index: SearchIndex) -> Response:
        ctx = context(request)
        node_id = request.path_params["node_id"]
        view = queries.entity(store, node_id, ctx["backbone"], ctx["as_of"])
        node = view.node
        svg = neighbourhood_svg(node, view.strongest, links(ctx)["entity_url"],
                                lambda n: links(ctx)["edge_url"](n.head_id, n.relation, n.tail_id))
        names = _mark_names(index, store, ctx["backbone"], view.evidence)
        return render(request, "kg_entity.html", ctx, view=view, node=node, svg=Markup(svg),
                      synonyms=index.synonyms(store, node_id, ctx["backbone"]),
                      ids=index.ids(store, node_id, ctx["backbone"]),
                      marked_for=lambda e: marked_html(e.evidence, word_spans(e.evidence, names(e))))

    @guarded
    def edge_page(request: Request, index: SearchIndex) -> Response:
        ctx = context(request)
        p = request.query_params
        missing = [k for k in ("head", "relation", "tail") if not p.get(k, "").strip()]
        if missing:
            raise BadInput(f"an edge needs head, relation and tail: {', '.join(missing)} missing")
        view = queries.edge(store, p["head"].strip(), p["relation"].strip(), p["tail"].strip(), ctx["backbone"],
                            ctx["as_of"])
        names = _mark_names(index, store, ctx["backbone"], view.evidence)
        return render(request, "kg_edge.html", ctx, view=view, chart=Markup(_chart(view.reinforcement)),
                      marked_for=lambda e: marked_html(e.evidence, word_spans(e.evidence, names(e))))

    @guarded
    def timeline_page(request: Request, index: SearchIndex) -> Response:  # noqa: ARG001 - guarded's signature
        ctx = context(request)
        raw = request.query_params.get("day", "").strip()
        try:
            day = dt.date.fromisoformat(raw) if raw else None
        except ValueError:
            raise BadInput(f"day {raw!r} is not a date (YYYY-MM-DD)") from None
        days = queries.timeline(store, ctx["backbone"], ctx["as_of"])
        detail = queries.day(store, ctx["backbone"], day) if day else None
        return render(request, "kg_timeline.html", ctx, days=days, day=detail)

    def svg(request: Request) -> Response:
        try:
            if not store.exists():
                raise BadInput("no KG yet in this data folder", 404)
            with store.connect(read_only=True):
                ctx = context(request)
                node, drawn = queries.neighbourhood(store, request.path_params["node_id"], ctx["backbone"],
                                                    ctx["as_of"])
        except BadInput as exc:
            return Response(str(exc), status_code=exc.status, media_type="text/plain")
        except queries.BrowseError as exc:
            return Response(str(exc), status_code=404, media_type="text/plain")
        caption = f"backbone {ctx['backbone']}" + (f", as of {ctx['as_of']}" if ctx["as_of"] else "")
        body = neighbourhood_svg(node, drawn, links(ctx)["entity_url"],
                                 lambda n: links(ctx)["edge_url"](n.head_id, n.relation, n.tail_id), caption)
        return Response('<?xml version="1.0" encoding="UTF-8"?>\n' + body, media_type="image/svg+xml")

    return [
        Route("/kg", search_page),
        Route("/kg/entity/{node_id:path}", entity_page),
        Route("/kg/neighbourhood/{node_id:path}", svg),
        Route("/kg/edge", edge_page),
        Route("/kg/timeline", timeline_page),
        Mount("/kg/static", StaticFiles(directory=str(HERE / "static")), name="kg_static"),
    ]


def _root(request: Request) -> str:
    """The session's path prefix the guard set (/s/<read key>; "" for a token-header caller)."""
    return str(request.scope.get("root_path", ""))


def _mark_names(index: SearchIndex, store: KGStore, namespace: str, rows: list[queries.EvidenceRow]):  # noqa: ANN202
    """row -> the (name, label) pairs to mark in its sentence: both ends' names and their longer synonyms."""
    cache: dict[str, list[str]] = {}

    def synonyms(node_id: str) -> list[str]:
        if node_id not in cache:
            cache[node_id] = [s for s in index.synonyms(store, node_id, namespace) if len(s) >= MIN_MARK_CHARS]
        return cache[node_id]

    def names(row: queries.EvidenceRow) -> list[tuple[str, str]]:
        return [(row.head_name, "head"), (row.tail_name, "tail"), *((s, "head") for s in synonyms(row.head_id)),
                *((s, "tail") for s in synonyms(row.tail_id))]

    return names


def _chart(points: list[queries.Reinforcement], width: int = 560, height: int = 140) -> str:
    """Confidence after each day as an inline SVG step line (presentation attributes only: the CSP)."""
    dated = [p for p in points if p.date is not None]
    if not dated:
        return ""
    pad, x0 = 30, 46
    first, last = dated[0].date, dated[-1].date
    span = max(1, (last - first).days)
    start = points[0].confidence if points[0].date is None else 0.0

    def x(d: dt.date) -> float:  # one day only: in the middle, the seed's level (if any) leading to it
        return x0 + (width - x0 - pad) * ((d - first).days / span if last != first else 0.5)

    def y(c: float) -> float:
        return height - pad + 10 - (height - pad - 10) * c

    path, dots = [f"M{x0 - 10:.1f},{y(start):.1f}"], []
    for p in dated:
        path.append(f"H{x(p.date):.1f}V{y(p.confidence):.1f}")
        dots.append(f'<circle cx="{x(p.date):.1f}" cy="{y(p.confidence):.1f}" r="3" fill="#3b6fd8">'
                    f'<title>{p.date}: {p.confidence:.3f} ({p.event})</title></circle>')
    axis = "".join(f'<line x1="{x0 - 10}" y1="{y(v):.1f}" x2="{width - pad}" y2="{y(v):.1f}" stroke="#e3e6ee"/>'
                   f'<text x="{x0 - 14}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" fill="#667">{v:.1f}</text>'
                   for v in (0.0, 0.5, 1.0))
    labels = (f'<text x="{x(first):.1f}" y="{height - 4}" font-size="10" fill="#667">{first}</text>'
              + (f'<text x="{x(last):.1f}" y="{height - 4}" font-size="10" text-anchor="end" fill="#667">{last}</text>'
                 if last != first else ""))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="confidence over time">{axis}'
            f'<path d="{"".join(path)}" fill="none" stroke="#3b6fd8" stroke-width="2"/>{"".join(dots)}{labels}</svg>')
