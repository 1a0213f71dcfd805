"""The viewer's pages as HTML, rendered on the server (no template engine: f-strings,
every value escaped with :func:`html.escape`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

import attrs

from tether.runtime import RUN_STATUSES, SORTS, RunPage, RunSummary, StoredRun, Termination

from ._source import Filters, usage_of

REDACTED = "[redacted]"
TERMINATIONS = tuple(t.value for t in Termination)


@attrs.frozen(kw_only=True)
class View:
    """What every page needs to know: where it is mounted and what it may show."""

    root: str
    redact: bool
    actions: bool
    #: The names of the agents whose runs can be replayed here.
    replayable: frozenset[str] = frozenset()
    title: str = "tether runs"


def e(value: object) -> str:
    return escape(str(value), quote=True)


def when(at: float | None) -> str:
    if at is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + " UTC"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 0.01:
        return f"{value * 1000:.2f} ms"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def money(cost: float | None) -> str:
    return "—" if cost is None else f"${cost:.4f}"


def count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def page(view: View, title: str, body: str, *, script: bool = True) -> str:
    js = f'<script src="{view.root}/static/viewer.js" defer></script>' if script else ""
    token = ""
    if view.actions:
        token = (
            '<form class="token" id="token-form" autocomplete="off">'
            '<label for="token">API token</label>'
            '<input id="token" name="token" type="password" '
            'placeholder="for approve, reject, cancel">'
            '<button type="submit">Use</button></form>'
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title>"
        f'<link rel="stylesheet" href="{view.root}/static/viewer.css">{js}</head>'
        f'<body data-root="{e(view.root)}">'
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header role="banner"><a class="brand" href="{view.root}/">tether</a>'
        f'<nav aria-label="Main"><a href="{view.root}/">Runs</a></nav>{token}</header>'
        f'<main id="main" tabindex="-1">{body}</main>'
        '<div id="status" role="status" aria-live="polite"></div>'
        "</body></html>"
    )


# ---------------------------------------------------------------- the list


def _select(name: str, label: str, options: Iterable[str], chosen: str | None) -> str:
    items = ['<option value="">any</option>'] + [
        f'<option value="{e(o)}"{" selected" if o == chosen else ""}>{e(o)}</option>'
        for o in options
    ]
    return (
        f'<label for="f-{name}">{e(label)}</label>'
        f'<select id="f-{name}" name="{name}">{"".join(items)}</select>'
    )


def _date(value: float | None) -> str:
    return "" if value is None else time.strftime("%Y-%m-%dT%H:%M", time.gmtime(value))


def list_page(view: View, runs: RunPage, filters: Filters, agents: Sequence[str]) -> str:
    f = filters
    agent_box = (
        '<label for="f-agent">Agent</label>'
        f'<input id="f-agent" name="agent" list="agents" value="{e(f.agent or "")}">'
        '<datalist id="agents">'
        + "".join(f'<option value="{e(a)}">' for a in agents)
        + "</datalist>"
    )
    form = (
        '<form class="filters" method="get" role="search" aria-label="Filter runs">'
        f"<div>{agent_box}</div>"
        f"<div>{_select('status', 'Status', RUN_STATUSES, f.status)}</div>"
        f"<div>{_select('termination', 'Termination', TERMINATIONS, f.termination)}</div>"
        '<div><label for="f-since">Started from (UTC)</label>'
        f'<input id="f-since" name="since" type="datetime-local" value="{_date(f.since)}"></div>'
        '<div><label for="f-until">until (UTC)</label>'
        f'<input id="f-until" name="until" type="datetime-local" value="{_date(f.until)}"></div>'
        f"<div>{_select('sort', 'Sort by', SORTS, f.sort)}</div>"
        f"<div>{_select('order', 'Order', ('newest', 'oldest'), f.order)}</div>"
        '<div class="go"><button type="submit">Filter</button>'
        f'<a href="{view.root}/">Clear</a></div></form>'
    )
    rows = "".join(_row(view, r) for r in runs.runs)
    table = (
        '<div class="scroll"><table class="runs"><caption>Runs'
        f' <span class="muted">({len(runs.runs)} shown; a linked column sorts every run, '
        "a column button this page)</span></caption><thead><tr>"
        + _sortable("Run", "run")
        + _sortable("Agent", "agent")
        + _sortable("Status", "status")
        + _sortable("Termination", "termination")
        + _sorted_by(view, f, "Rounds", "rounds")
        + _sorted_by(view, f, "Tokens", "tokens")
        + _sorted_by(view, f, "Cost", "cost")
        + _sorted_by(view, f, "Started", "started")
        + _sorted_by(view, f, "Duration", "duration")
        + f"</tr></thead><tbody>{rows}</tbody></table></div>"
    )
    if not runs.runs:
        table += '<p class="empty">No runs match.</p>'
    pager = ""
    if runs.next is not None:
        pager = (
            f'<nav class="pager" aria-label="Pages"><a rel="next" '
            f'href="{_query(view, f, after=runs.next)}">Next page →</a></nav>'
        )
    if f.after is not None:
        pager = (
            '<nav class="pager" aria-label="Pages">'
            f'<a href="{_query(view, f, after=None)}">← First page</a>'
            + (pager[pager.index("<a rel") : -6] if pager else "")
            + "</nav>"
        )
    return page(view, view.title, f"<h1>Runs</h1>{form}{table}{pager}")


def _sortable(label: str, key: str, *, numeric: bool = False) -> str:
    """A column header whose button sorts the page's rows (viewer.js)."""
    kind = ' class="n"' if numeric else ""
    return (
        f'<th scope="col"{kind}><button type="button" class="sort" data-sort="{key}"'
        f"{' data-numeric' if numeric else ''}>{e(label)}</button></th>"
    )


def _sorted_by(view: View, f: Filters, label: str, key: str) -> str:
    """A column header whose link sorts every run by ``key`` in the store (descending
    first; the active column's link turns the order round)."""
    active = f.sort == key
    order = ("oldest" if f.order == "newest" else "newest") if active else "newest"
    link = _query(view, f, sort=key, order=order, after=None)
    way = "descending" if f.order == "newest" else "ascending"
    aria = f' aria-sort="{way}"' if active else ""
    arrow = (" ↓" if f.order == "newest" else " ↑") if active else ""
    kind = "" if key == "started" else ' class="n"'
    return (
        f'<th scope="col"{kind}{aria} data-sorted-by="{key}">'
        f'<a href="{link}" title="every run, by {label.lower()}">{e(label)}{arrow}</a></th>'
    )


def _query(view: View, f: Filters, **changed: Any) -> str:
    values = attrs.asdict(attrs.evolve(f, **changed))
    values.pop("limit")
    for key in ("since", "until"):
        if values[key] is not None:
            values[key] = _date(values[key])
    if values["order"] == "newest":
        values.pop("order")
    if values["sort"] == "started":
        values.pop("sort")
    kept = {k: v for k, v in values.items() if v is not None}
    return f"{view.root}/?{urlencode(kept)}" if kept else f"{view.root}/"


def _row(view: View, r: RunSummary) -> str:
    status = "parked" if r.status in ("parked", "ready") else r.status

    def v(value: object) -> str:
        return "" if value is None else e(value)

    return (
        f'<tr data-run="{e(r.run_id)}" data-agent="{e(r.agent)}" data-status="{e(r.status)}"'
        f' data-termination="{v(r.termination)}" data-rounds="{v(r.rounds)}"'
        f' data-tokens="{v(r.tokens)}" data-cost="{v(r.cost_usd)}"'
        f' data-duration="{v(r.duration_s)}">'
        f'<th scope="row"><a href="{view.root}/runs/{quote(r.run_id, safe="")}">'
        f"{e(r.run_id)}</a></th><td>{e(r.agent)}</td>"
        f'<td><span class="badge s-{e(status)}">{e(r.status)}</span></td>'
        f'<td><span class="term t-{e(r.termination or "")}">{e(r.termination or "—")}</span></td>'
        f'<td class="n">{count(r.rounds)}</td><td class="n">{count(r.tokens)}</td>'
        f'<td class="n">{money(r.cost_usd)}</td><td>{when(r.created_at)}</td>'
        f'<td class="n">{seconds(r.duration_s)}</td></tr>'
    )


# ---------------------------------------------------------------- a run


def run_page(
    view: View,
    run: StoredRun,
    events: Sequence[Mapping[str, Any]],
    limits: Mapping[str, float | None],
    *,
    live: bool,
) -> str:
    header = run_header(view, run, limits, events)
    timeline = timeline_html(view, run, events)
    attrs_live = (
        f' data-live="{view.root}/runs/{quote(run.run_id, safe="")}/stream"'
        f' data-seen="{len(events)}"'
        if live and run.status != "finished"
        else ""
    )
    body = (
        f'<article class="run" id="run"{attrs_live} data-run="{e(run.run_id)}"'
        f' data-status="{e(run.status)}">'
        f'<div id="run-head">{header}</div>'
        f'<section aria-labelledby="tl-h"><h2 id="tl-h">Timeline</h2>'
        f'<div id="timeline">{timeline}</div></section>'
        f"{messages_html(view, run)}</article>"
    )
    return page(view, f"{run.run_id} · {view.title}", body)


def events_usage(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A run's usage so far, counted from its events: what a run in flight has spent,
    ahead of its last checkpoint (charges, rounds with a model response, tool calls)."""
    input_tokens = output_tokens = tool_calls = 0
    cost: float | None = 0.0
    rounds: set[int] = set()
    for ev in events:
        kind = ev.get("type")
        if kind == "UsageCharged":
            input_tokens += int(ev.get("input_tokens") or 0)
            output_tokens += int(ev.get("output_tokens") or 0)
            charge = ev.get("cost_usd")
            cost = None if cost is None or charge is None else cost + float(charge)
        elif kind == "ModelCallFinished":
            rounds.add(int(ev.get("round", 0)))
        elif kind == "ToolCallFinished":
            tool_calls += 1
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost,
        "unpriced": cost is None,
        "steps": len(rounds),
        "tool_calls": tool_calls,
    }


def run_header(
    view: View,
    run: StoredRun,
    limits: Mapping[str, float | None],
    events: Sequence[Mapping[str, Any]] = (),
) -> str:
    usage = usage_of(run)
    if run.status != "finished" and events:
        usage = {**usage, **events_usage(events)}
    result = run.result if isinstance(run.result, dict) else {}
    termination = result.get("termination")
    tokens = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    cost = None if usage.get("unpriced") else usage.get("cost_usd")
    facts = [
        ("Agent", e(run.agent)),
        ("Status", f'<span class="badge s-{e(run.status)}" id="run-status">{e(run.status)}</span>'),
        ("Termination", e(termination or "—")),
        ("Started", when(run.created_at)),
        ("Rounds", count(usage.get("steps"))),
        ("Tokens", f"{tokens:,}" if usage else "—"),
        ("Cost", money(cost)),
        ("Events", count(run.events)),
    ]
    if run.parent_run_id:
        facts.append(
            (
                "Parent",
                f'<a href="{view.root}/runs/{quote(run.parent_run_id, safe="")}">'
                f"{e(run.parent_run_id)}</a>",
            )
        )
    dl = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
    inp = REDACTED if view.redact else run.input
    out = result.get("output")
    output = ""
    if out is not None:
        output = f'<h2>Output</h2><pre class="text">{e(REDACTED if view.redact else out)}</pre>'
    if result.get("error"):
        output += f'<p class="error">Error: {e(result["error"])}</p>'
    return (
        f'<h1>Run <code>{e(run.run_id)}</code></h1><dl class="facts">{dl}</dl>'
        f'<h2>Input</h2><pre class="text">{e(inp)}</pre>{output}'
        f"{ceilings_html(run, usage, limits)}{actions_html(view, run)}{replay_html(view, run)}"
    )


def ceilings_html(
    run: StoredRun, usage: Mapping[str, Any], limits: Mapping[str, float | None]
) -> str:
    used = {
        "max_steps": usage.get("steps"),
        "max_tool_calls": usage.get("tool_calls"),
        "max_total_tokens": (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
        if usage
        else None,
        "max_cost_usd": None if usage.get("unpriced") else usage.get("cost_usd"),
        "max_quality_retries": usage.get("quality_retries"),
        "max_continues": usage.get("continues"),
    }
    bars = []
    for name, limit in limits.items():
        value = used.get(name)
        if limit is None or value is None:
            continue
        share = max(0.0, min(1.0, float(value) / float(limit))) if limit else 1.0
        label = f"{name.removeprefix('max_').replace('_', ' ')}: {value:g} of {limit:g}"
        bars.append(
            f'<li><span class="bar-label">{e(label)}</span>'
            f'<meter min="0" max="{float(limit):g}" value="{float(value):g}" '
            f'high="{float(limit) * 0.8:g}" aria-label="{e(label)}">{share:.0%}</meter></li>'
        )
    if not bars:
        return ""
    return f'<h2>Ceilings</h2><ul class="ceilings">{"".join(bars)}</ul>'


def replay_html(view: View, run: StoredRun) -> str:
    """A finished run of a known agent: a button that replays it offline (the page
    says ``identical`` or where it diverged); otherwise the command that would."""
    if run.status != "finished":
        return ""
    head = (
        '<section aria-labelledby="replay-h"><h2 id="replay-h">Replay</h2>'
        "<p>Re-run the agent's code offline against this run's recorded model responses "
        "and tool results (no model is called, no tool executed).</p>"
    )
    if run.agent in view.replayable:
        base = f"{view.root}/runs/{quote(run.run_id, safe='')}"
        return (
            f'{head}<form class="action" method="post" action="{base}/replay" data-action>'
            '<button type="submit" data-verb="replay">Replay this run</button></form></section>'
        )
    command = f"tether replay --store STORE_URL {run.run_id} --agent MODULE:AGENT"
    return f'{head}<pre class="args"><code>{e(command)}</code></pre></section>'


def actions_html(view: View, run: StoredRun) -> str:
    if not view.actions or run.status == "finished":
        return ""
    base = f"{view.root}/runs/{quote(run.run_id, safe='')}"
    answered = {a.call_id for a in run.answers}
    forms = []
    for call_id in run.pending:
        if call_id in answered:
            continue
        forms.append(
            f'<form class="action" method="post" action="{base}/approve" data-action>'
            f'<input type="hidden" name="call_id" value="{e(call_id)}">'
            f"<fieldset><legend>Held call <code>{e(call_id)}</code></legend>"
            f'<button type="submit" name="verdict" value="approve" '
            f'data-verb="approve">Approve</button>'
            f'<label for="why-{e(call_id)}">Reason (for a rejection)</label>'
            f'<input id="why-{e(call_id)}" name="reason" value="rejected in the viewer">'
            f'<button type="submit" name="verdict" value="reject" data-verb="reject" '
            f'formaction="{base}/reject">Reject</button></fieldset></form>'
        )
    forms.append(
        f'<form class="action" method="post" action="{base}/cancel" data-action>'
        "<fieldset><legend>Cancel the run</legend>"
        '<label for="cancel-why">Reason</label>'
        '<input id="cancel-why" name="reason" value="cancelled in the viewer">'
        '<button type="submit" class="danger" data-verb="cancel">Cancel run</button>'
        "</fieldset></form>"
    )
    return f'<section aria-labelledby="act-h"><h2 id="act-h">Actions</h2>{"".join(forms)}</section>'


def _text(view: View, value: Any) -> str:
    if view.redact:
        return REDACTED
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def transcript(run: StoredRun) -> list[Mapping[str, Any]]:
    """The run's messages as the store has them: the result's, else the last checkpoint's,
    else the ones it started from."""
    result = run.result if isinstance(run.result, dict) else {}
    checkpoint = run.checkpoint if isinstance(run.checkpoint, dict) else {}
    messages = result.get("messages") or checkpoint.get("messages") or run.messages or []
    return [m for m in messages if isinstance(m, dict)]


@attrs.frozen
class CallMessages:
    """A model call's part of the transcript: the messages added since the previous
    response (what this call sent that the one before had not) and its response as kept
    (``None``: in flight, or not kept)."""

    sent: list[Mapping[str, Any]]
    response: Mapping[str, Any] | None


def calls_of(messages: Sequence[Mapping[str, Any]]) -> list[CallMessages]:
    """The k-th model response of the run is the k-th assistant message: the messages
    before it and after the previous one are what the k-th call sent anew."""
    calls: list[CallMessages] = []
    sent: list[Mapping[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant":
            calls.append(CallMessages(sent, message))
            sent = []
        else:
            sent.append(message)
    calls.append(CallMessages(sent, None))
    return calls


def timeline_html(view: View, run: StoredRun, events: Sequence[Mapping[str, Any]]) -> str:
    rounds: dict[int, list[Mapping[str, Any]]] = {}
    for event in events:
        rounds.setdefault(int(event.get("round", 0)), []).append(event)
    sent = iter(calls_of(transcript(run)))
    parts = []
    for number, items in sorted(rounds.items()):
        parts.append(_round(view, number, items, sent))
    return "".join(parts) or '<p class="empty">No events yet.</p>'


def _round(
    view: View,
    number: int,
    items: Sequence[Mapping[str, Any]],
    sent: Iterator[CallMessages],
) -> str:
    body: list[str] = []
    starts: dict[str, Mapping[str, Any]] = {}
    for ev in items:
        kind = ev.get("type")
        if kind == "ModelCallStarted":
            body.append(
                f'<li class="ev model-start">Model call, attempt {e(ev.get("attempt"))}</li>'
            )
        elif kind == "ProviderRetry":
            body.append(
                f'<li class="ev retry">Retry after {e(ev.get("error_type"))} '
                f"(attempt {e(ev.get('attempt'))}, waiting {seconds(ev.get('wait_s'))})"
                f" {e(ev.get('message') or '')}</li>"
            )
        elif kind == "ProviderFallback":
            body.append(
                f'<li class="ev retry">Fallback {e(ev.get("from_model"))} → '
                f"{e(ev.get('to_model'))} ({e(ev.get('error_type'))})</li>"
            )
        elif kind == "UsageCharged":
            body.append(
                f'<li class="ev usage">Charged {count(ev.get("input_tokens"))} in / '
                f"{count(ev.get('output_tokens'))} out tokens, {money(ev.get('cost_usd'))}"
                f" ({e(ev.get('source'))})</li>"
            )
        elif kind == "ModelCallFinished":
            body.append(_model_call(view, ev, next(sent, CallMessages([], None))))
        elif kind == "ToolCallStarted":
            starts[str(ev.get("call_id"))] = ev
        elif kind == "ToolCallFinished":
            body.append(_tool_call(view, starts.pop(str(ev.get("call_id")), None), ev))
        elif kind == "Judged":
            body.append(_judged(ev))
        elif kind == "PolicyChecked":
            body.append(
                f'<li class="ev policy v-{e(ev.get("verdict"))}">Policy at '
                f"{e(ev.get('point'))}: <strong>{e(ev.get('verdict'))}</strong>"
                f"{' — ' + e(ev.get('reason')) if ev.get('reason') else ''}</li>"
            )
        elif kind == "ApprovalRequested":
            body.append(
                f'<li class="ev approval">Approval requested for <code>{e(ev.get("name"))}</code>'
                f" (<code>{e(ev.get('call_id'))}</code>): {e(ev.get('reason'))}</li>"
            )
        elif kind == "ApprovalAnswered":
            verdict = "approved" if ev.get("approved") else "rejected"
            body.append(
                f'<li class="ev approval">Call <code>{e(ev.get("call_id"))}</code> {verdict}'
                f"{' — ' + e(ev.get('reason')) if ev.get('reason') else ''}</li>"
            )
        elif kind == "Transition":
            body.append(
                f'<li class="ev transition">→ {e(ev.get("kind"))} ({e(ev.get("reason"))})</li>'
            )
        elif kind == "CeilingHit":
            body.append(
                f'<li class="ev ceiling">Ceiling {e(ev.get("ceiling"))} hit: used '
                f"{e(ev.get('used'))} of {e(ev.get('limit'))}</li>"
            )
        elif kind in ("RunResumed", "RunForked"):
            detail = ", ".join(
                f"{k} {e(v)}"
                for k, v in ev.items()
                if k not in ("type", "run_id", "seq", "round", "at") and v is not None
            )
            body.append(f'<li class="ev seam" role="separator">{e(kind)}: {detail}</li>')
        elif kind == "RunStarted":
            body.append(
                f'<li class="ev start">Started: agent {e(ev.get("agent"))}'
                f"{', model ' + e(ev.get('model')) if ev.get('model') else ''}</li>"
            )
        elif kind == "RunFinished":
            body.append(
                f'<li class="ev finish">Finished: <strong>{e(ev.get("termination"))}</strong>'
                f"{' — ' + e(ev.get('error')) if ev.get('error') else ''}</li>"
            )
        elif kind not in ("StageEntered", "StageExited"):
            body.append(f'<li class="ev other">{e(kind)}</li>')
    for call_id, ev in starts.items():  # started, not finished (yet)
        body.append(
            f'<li class="ev tool running">Tool <code>{e(ev.get("name"))}</code> '
            f"(<code>{e(call_id)}</code>) running…</li>"
        )
    title = "Setup" if number == 0 else f"Round {number}"
    return (
        f'<section class="round" aria-labelledby="round-{number}" data-round="{number}">'
        f'<h3 id="round-{number}">{title}</h3>{_waterfall(items)}'
        f'<ol class="events">{"".join(body)}</ol></section>'
    )


def _waterfall(items: Sequence[Mapping[str, Any]]) -> str:
    opened: dict[str, float] = {}
    spans: list[tuple[str, float, float]] = []
    for ev in items:
        if ev.get("type") == "StageEntered":
            opened[str(ev.get("stage"))] = float(ev.get("at", 0.0))
        elif ev.get("type") == "StageExited":
            stage = str(ev.get("stage"))
            if stage in opened:
                spans.append((stage, opened.pop(stage), float(ev.get("at", 0.0))))
    spans += [(stage, at, at) for stage, at in opened.items()]
    if not spans:
        return ""
    first = min(s for _, s, _ in spans)
    total = max(end for _, _, end in spans) - first or 1e-9
    rows = []
    for stage, start, end in spans:
        left = (start - first) / total * 100
        width = max(0.5, (end - start) / total * 100)
        rows.append(
            f'<li><span class="stage">{e(stage)}</span><span class="lane">'
            f'<span class="span st-{e(stage)}" style="left:{left:.1f}%;width:{width:.1f}%">'
            f'</span></span><span class="dur">{seconds(end - start)}</span></li>'
        )
    return f'<ul class="waterfall" aria-label="Stages of the round">{"".join(rows)}</ul>'


def _model_call(view: View, ev: Mapping[str, Any], call: CallMessages) -> str:
    usage = ev.get("usage") or {}
    calls = "".join(
        f"<li>Tool call <code>{e(c.get('name'))}</code> (<code>{e(c.get('id'))}</code>)"
        f'<pre class="args">{e(_text(view, c.get("input")))}</pre></li>'
        for c in ev.get("tool_calls") or ()
    )
    blocks = (call.response or {}).get("content") or ()
    thoughts = [b for b in blocks if isinstance(b, dict) and b.get("type") == "reasoning"]
    think = "".join(
        "<details><summary>Reasoning</summary>"
        + (
            '<p class="muted">(redacted by the vendor)</p>'
            if b.get("redacted")
            else f'<pre class="text">{e(_text(view, b.get("text", "")))}</pre>'
        )
        + "</details>"
        for b in thoughts
    )
    sent = call.sent
    text = ev.get("text") or ""
    request = ""
    if sent:
        request = (
            f"<details><summary>Messages sent (new since the previous call: {len(sent)})"
            f'</summary><ol class="messages">{"".join(_message(view, m) for m in sent)}'
            "</ol></details>"
        )
    return (
        '<li class="ev model">' + request + "<details open><summary>Model response "
        f"({e(ev.get('model') or 'model')}, stop {e(ev.get('stop_reason'))}, "
        f"{count(usage.get('input_tokens'))} in / {count(usage.get('output_tokens'))} out)"
        f"</summary>{think}"
        + (f'<pre class="text">{e(_text(view, text))}</pre>' if text else "")
        + (f'<ul class="calls">{calls}</ul>' if calls else "")
        + "</details></li>"
    )


def _tool_call(view: View, start: Mapping[str, Any] | None, end: Mapping[str, Any]) -> str:
    took = None if start is None else float(end.get("at", 0)) - float(start.get("at", 0))
    outcome = str(end.get("outcome"))
    args = "" if start is None else _text(view, start.get("arguments"))
    label = "Error" if end.get("is_error") else "Result"
    return (
        f'<li class="ev tool o-{e(outcome)}" data-call="{e(end.get("call_id"))}">'
        f"<details open><summary>Tool <code>{e(end.get('name'))}</code> "
        f"(<code>{e(end.get('call_id'))}</code>): <strong>{e(outcome)}</strong>, "
        f"{e(end.get('attempts'))} attempt(s), {seconds(took)}</summary>"
        f'<h4>Arguments</h4><pre class="args">{e(args)}</pre>'
        f'<h4>{label}</h4><pre class="text">{e(_text(view, end.get("content")))}</pre>'
        "</details></li>"
    )


def _judged(ev: Mapping[str, Any]) -> str:
    scores = ev.get("scores") or {}
    feedback = ev.get("feedback") or {}
    rows = "".join(
        f'<tr><th scope="row">{e(name)}</th><td class="n">{float(score):.2f}</td>'
        f"<td>{e(feedback.get(name, ''))}</td></tr>"
        for name, score in scores.items()
    )
    verdict = "passed" if ev.get("passed") else "failed"
    return (
        f'<li class="ev judged {verdict}"><strong>Judgement: {verdict}</strong>'
        + (f" ({e(ev.get('error'))})" if ev.get("error") else "")
        + '<table class="scores"><thead><tr><th scope="col">Criterion</th>'
        '<th scope="col" class="n">Score</th><th scope="col">Feedback</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></li>"
    )


def _message(view: View, message: Mapping[str, Any]) -> str:
    parts = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            parts.append(f'<pre class="text">{e(_text(view, block.get("text")))}</pre>')
        elif kind == "tool_use":
            parts.append(
                f"<p>Tool call <code>{e(block.get('name'))}</code></p>"
                f'<pre class="args">{e(_text(view, block.get("input")))}</pre>'
            )
        elif kind == "tool_result":
            parts.append(
                f"<p>Result of <code>{e(block.get('tool_use_id'))}</code></p>"
                f'<pre class="text">{e(_text(view, block.get("content")))}</pre>'
            )
        elif kind == "reasoning":
            parts.append(
                f'<p>Reasoning</p><pre class="text">{e(_text(view, block.get("text")))}</pre>'
            )
        else:
            parts.append(f'<pre class="args">{e(_text(view, block))}</pre>')
    role = message.get("role")
    return f'<li class="msg r-{e(role)}"><h4>{e(role)}</h4>{"".join(parts)}</li>'


def messages_html(view: View, run: StoredRun) -> str:
    messages = transcript(run)
    if not messages:
        return ""
    items = "".join(_message(view, m) for m in messages)
    return (
        '<section aria-labelledby="msg-h"><details><summary><h2 id="msg-h">Messages</h2>'
        f'</summary><ol class="messages">{items}</ol></details></section>'
    )


__all__ = ["View", "list_page", "run_header", "run_page", "timeline_html"]
