"""An entity's neighbourhood drawn as SVG: a deterministic radial layout, readable without any script.

Why radial and not a force layout: one centre and at most a few dozen neighbours (the strongest edges) fit on one
or two rings; the same entity is always drawn the same way (neighbours sorted by relation, then confidence), so a
person comparing two as-of dates sees what changed, not a reshuffle. Neighbours alternate between two rings when
there are many, so their labels do not collide; relation labels run along their edge, upright. Colours come from
presentation attributes (the guard's CSP forbids inline style), nodes link to their entity pages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from xml.sax.saxutils import escape, quoteattr

from karma_dagster.browse.queries import Neighbour, NodeInfo

WIDTH, HEIGHT = 980, 760
KIND_COLOURS = {"Gene": "#3b6fd8", "Compound": "#d8742b", "Disease": "#c0392b", "Anatomy": "#8e6c3a",
                "Symptom": "#b0407f", "Side Effect": "#9b59b6", "Biological Process": "#2e8b57",
                "Pathway": "#16a085", "Cellular Component": "#5d8a2f", "Molecular Function": "#6b8e23",
                "Pharmacologic Class": "#a67c00"}
RELATION_COLOURS = ("#4a6fa5", "#c06c2b", "#2e8b57", "#8e44ad", "#b03a48", "#16828a", "#7a6a1f", "#5d5d8a",
                    "#a0522d", "#3c7d3c")
LABEL_CHARS = 26


def _short(text: str, n: int = LABEL_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _a(value: object) -> str:
    return quoteattr(str(value))


def neighbourhood_svg(centre: NodeInfo, neighbours: list[Neighbour], link: Callable[[str], str],
                      edge_link: Callable[[Neighbour], str] | None = None, caption: str = "") -> str:
    """The SVG document: `centre` in the middle, each neighbour on a ring, one line each (styled as its strongest
    edge, labelled with all its relations)."""
    cx, cy = WIDTH / 2, HEIGHT / 2 + 20
    by_other: dict[str, list[Neighbour]] = {}
    for n in sorted(neighbours, key=lambda n: (-n.confidence, n.relation)):
        by_other.setdefault(n.other_id, []).append(n)
    # one line per neighbour: its strongest edge's colour and arrow, every relation in its label
    labels = {o: ", ".join(dict.fromkeys(e.relation for e in es)) for o, es in by_other.items()}
    ordered = sorted((es[0] for es in by_other.values()),
                     key=lambda n: (n.relation, n.direction, -n.confidence, n.other_name.lower()))
    relations = sorted({(n.relation, n.direction) for n in ordered})
    colour = {r: RELATION_COLOURS[i % len(RELATION_COLOURS)] for i, r in enumerate(relations)}
    two_rings = len(ordered) > 14
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="system-ui, sans-serif" '
           f'role="img" aria-label={_a(f"neighbourhood of {centre.name}")}>',
           f'<title>{escape(f"{centre.name} ({centre.id}): {len(ordered)} strongest neighbours")}</title>',
           '<defs>' + "".join(
               f'<marker id="arrow{i}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" markerHeight="9" '
               f'markerUnits="userSpaceOnUse" '
               f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour[r]}"/></marker>'
               for i, r in enumerate(relations)) + '</defs>',
           f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>']
    # legend: one line per (relation, direction), top left
    for i, (rel, direction) in enumerate(relations):
        y = 18 + 16 * i
        text = f"{centre.name} -{rel}-> …" if direction == "out" else f"… -{rel}-> {centre.name}"
        out.append(f'<line x1="10" y1="{y - 4}" x2="34" y2="{y - 4}" stroke="{colour[(rel, direction)]}" '
                   f'stroke-width="3"/><text x="40" y="{y}" font-size="12" fill="#333">{escape(_short(text, 48))}</text>')
    if caption:
        out.append(f'<text x="{WIDTH - 10}" y="18" font-size="12" fill="#556" text-anchor="end">{escape(caption)}</text>')
    marker = {r: i for i, r in enumerate(relations)}
    nodes = []
    for i, n in enumerate(ordered):
        angle = -math.pi / 2 + 2 * math.pi * i / max(1, len(ordered))
        radius = (215 if i % 2 == 0 else 305) if two_rings else 270
        x, y = cx + radius * math.cos(angle), cy + radius * math.sin(angle)
        key = (n.relation, n.direction)
        # the edge, from the centre's rim to the neighbour's, arrow at the tail end
        ux, uy = math.cos(angle), math.sin(angle)
        x1, y1, x2, y2 = cx + 16 * ux, cy + 16 * uy, x - 9 * ux, y - 9 * uy
        if n.direction == "in":
            x1, y1, x2, y2 = x2, y2, x1, y1
        width = 1.2 + 2.8 * n.confidence
        title = escape("; ".join(f"{e.head_id} -{e.relation}-> {e.tail_id}: confidence {e.confidence:.2f}, "
                                 f"{e.n_evidence} evidence, {e.n_papers} papers" + (", seed" if e.in_seed else "")
                                 for e in by_other[n.other_id]))
        line = (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour[key]}" '
                f'stroke-width="{width:.1f}" stroke-opacity="0.75" marker-end="url(#arrow{marker[key]})">'
                f'<title>{title}</title></line>')
        out.append(f'<a href={_a(edge_link(n))} xlink:href={_a(edge_link(n))}>{line}</a>' if edge_link else line)
        # the relation label along the edge, upright, in the middle of its free length
        deg = math.degrees(angle)
        upright = deg + 180 if math.cos(angle) < 0 else deg
        lr = 16 + (radius - 25) * (0.55 if two_rings and i % 2 else 0.62)
        lx, ly = cx + lr * ux, cy + lr * uy
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" fill="{colour[key]}" text-anchor="middle" '
                   f'dy="-3" transform="rotate({upright:.1f} {lx:.1f} {ly:.1f})" stroke="#ffffff" stroke-width="3" '
                   f'paint-order="stroke">{escape(_short(labels[n.other_id], 30))}</text>')
        anchor = "start" if ux > 0.25 else "end" if ux < -0.25 else "middle"
        tx = x + (12 if anchor == "start" else -12 if anchor == "end" else 0)
        ty = y + (4 if anchor != "middle" else (20 if uy > 0 else -13))
        href = link(n.other_id)
        nodes.append(
            f'<a href={_a(href)} xlink:href={_a(href)} class="node"><title>{escape(f"{n.other_name} ({n.other_kind}, {n.other_id})")}'
            f'</title><circle cx="{x:.1f}" cy="{y:.1f}" r="8" fill="{KIND_COLOURS.get(n.other_kind, "#777")}" '
            f'stroke="#ffffff" stroke-width="1.5"/><text x="{tx:.1f}" y="{ty:.1f}" font-size="12.5" fill="#1d2430" '
            f'text-anchor="{anchor}" stroke="#ffffff" stroke-width="3.5" paint-order="stroke">'
            f'{escape(_short(n.other_name))}</text></a>')
    out += nodes  # nodes above every edge
    out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="15" fill="{KIND_COLOURS.get(centre.kind, "#777")}" '
               f'stroke="#1d2430" stroke-width="2"/>'
               f'<text x="{cx:.1f}" y="{cy + 33:.1f}" font-size="15" font-weight="bold" fill="#1d2430" '
               f'text-anchor="middle" stroke="#ffffff" stroke-width="4" paint-order="stroke">'
               f'{escape(_short(centre.name, 40))}</text>')
    if not ordered:
        out.append(f'<text x="{cx:.1f}" y="{cy + 60:.1f}" font-size="13" fill="#556" text-anchor="middle">'
                   'no edges as of this date</text>')
    out.append("</svg>")
    return "\n".join(out)
