"""The report as one self-contained HTML page: inline CSS and JS, no CDN, no fetch."""

from __future__ import annotations

import html
import json
from typing import Any

from ._report import (
    Aggregates,
    CaseDelta,
    CaseResult,
    Comparison,
    EvalReport,
    aggregate,
    criterion_key,
)

_CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --muted: #57606a; --line: #d0d7de; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2328; }
header { padding: 16px 24px; border-bottom: 1px solid var(--line); background: var(--bg); }
h1 { font-size: 20px; margin: 0 0 4px; }
.sub { color: var(--muted); }
main { padding: 16px 24px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 16px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 18px; }
.card span { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: var(--bg); position: sticky; top: 0; }
tr.case { cursor: pointer; }
tr.case:hover { background: #eef4ff; }
tr.case.open { background: #ddf4ff; }
.pass { color: var(--ok); font-weight: 600; }
.fail { color: var(--bad); font-weight: 600; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 12px;
  background: #ffebe9; color: var(--bad); border: 1px solid #ff818266; }
.badge.up { background: #dafbe1; color: var(--ok); border-color: #4ac26b66; }
tr.detail > td { background: #fbfcfd; padding: 12px 16px; }
tr.detail[hidden] { display: none; }
.run { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 6px 0; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--bg); padding: 6px 8px;
  border-radius: 4px; margin: 4px 0; max-height: 320px; overflow: auto; }
.toolbar { display: flex; gap: 12px; align-items: center; margin: 8px 0 12px; }
input[type=search] { padding: 4px 8px; width: 260px; }
"""

_JS = """
(function () {
  function toggle(row) {
    var detail = document.getElementById('detail-' + row.dataset.index);
    var open = detail.hidden;
    detail.hidden = !open;
    row.classList.toggle('open', open);
    row.setAttribute('aria-expanded', open ? 'true' : 'false');
  }
  document.querySelectorAll('tr.case').forEach(function (row) {
    row.addEventListener('click', function () { toggle(row); });
    row.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(row); }
    });
  });
  var search = document.getElementById('filter');
  var failed = document.getElementById('failed-only');
  function apply() {
    var q = search.value.toLowerCase();
    document.querySelectorAll('tr.case').forEach(function (row) {
      var show = (!q || row.textContent.toLowerCase().indexOf(q) >= 0) &&
        (!failed.checked || row.dataset.state !== 'pass');
      row.hidden = !show;
      var detail = document.getElementById('detail-' + row.dataset.index);
      if (!show) { detail.hidden = true; row.classList.remove('open'); }
    });
  }
  search.addEventListener('input', apply);
  failed.addEventListener('change', apply);
})();
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _money(value: float | None) -> str:
    if value is None:
        return "unpriced"
    return f"${value:.4f}" if value >= 0.01 or value == 0 else f"${value:.6f}"


def _secs(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def _signed(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value * 100:+.1f} pt" if pct else f"{value:+.3f}"


def _cards(agg: Aggregates, comparison: Comparison | None) -> str:
    cards = [
        ("pass rate", _pct(agg.pass_rate)),
        ("passed", f"{agg.passed} / {agg.evaluated}"),
        ("tokens", f"{agg.tokens:,}"),
        ("cost", _money(agg.cost_usd)),
        ("latency p50", _secs(agg.latency_p50_s)),
        ("latency p95", _secs(agg.latency_p95_s)),
    ]
    cards += [(f"mean {name}", f"{mean:.3f}") for name, mean in agg.criteria.items()]
    if comparison is not None:
        cards.append(("vs baseline", _signed(comparison.pass_rate_delta, pct=True)))
        cards.append(("regressed cases", str(len(comparison.regressions))))
    return "".join(
        f'<div class="card"><b>{_e(value)}</b><span>{_e(label)}</span></div>'
        for label, value in cards
    )


def _run_detail(r: CaseResult) -> str:
    parts = [
        f'<div class="run" data-repeat="{r.repeat}">',
        f"<div><b>repeat {r.repeat + 1}</b> · "
        f'<span class="{"pass" if r.passed else "fail"}">{"pass" if r.passed else "fail"}</span>'
        f" · {_e(r.termination or r.status)} · {_secs(r.latency_s)} · "
        f"{r.tokens:,} tokens · {_money(r.cost_usd)}</div>",
    ]
    if r.note:
        parts.append(f'<div class="muted">{_e(r.note)}</div>')
    output = r.output if isinstance(r.output, str) else json.dumps(r.output, ensure_ascii=False)
    parts.append(f'<div class="muted">output</div><pre class="output">{_e(output)}</pre>')
    if r.error:
        parts.append(f'<div class="muted">error</div><pre>{_e(r.error)}</pre>')
    if r.judgements:
        rows = []
        for judge, j in r.judgements.items():
            if j.error:
                rows.append(
                    f'<tr><td>{_e(judge)}</td><td>—</td><td class="fail">error</td>'
                    f"<td>{_e(j.error)}</td></tr>"
                )
            for criterion, score in j.scores.items():
                ok = criterion not in j.feedback
                rows.append(
                    f"<tr><td>{_e(criterion_key(judge, criterion))}</td><td>{score:.2f}</td>"
                    f'<td class="{"pass" if ok else "fail"}">{"pass" if ok else "fail"}</td>'
                    f"<td>{_e(j.reasons.get(criterion, ''))}</td></tr>"
                )
        parts.append(
            '<table class="judgements"><tr><th>criterion</th><th>score</th><th></th>'
            f"<th>reason / feedback</th></tr>{''.join(rows)}</table>"
        )
    if r.summary:
        parts.append(f'<div class="muted">run {_e(r.run_id)}</div><pre>{_e(r.summary)}</pre>')
    parts.append("</div>")
    return "".join(parts)


def render_html(report: EvalReport, baseline: EvalReport | None = None) -> str:
    """``report`` as one self-contained HTML page (inline CSS and JS, nothing loaded
    from elsewhere): summary cards, a table of cases, and a drill-down per case (click
    a row: its input, expected answer, and every repeat's output, judgements, usage).
    With ``baseline``, the deltas and the cases that regressed too."""
    comparison = report.compare(baseline) if baseline is not None else None
    agg = report.aggregates()
    deltas: dict[str, CaseDelta] = (
        {d.case_id: d for d in comparison.cases} if comparison is not None else {}
    )
    keys = list(agg.criteria)
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    rows = []
    for index, (case_id, results) in enumerate(report.by_case().items()):
        case = aggregate(results)
        state = "pass" if case.evaluated and case.passed == case.evaluated else "fail"
        if not case.evaluated:
            state = "none"
        first = results[0]
        badge = ""
        delta = deltas.get(case_id)
        if delta is not None and delta.regressed:
            badge = ' <span class="badge">regressed</span>'
        elif delta is not None and delta.improved:
            badge = ' <span class="badge up">improved</span>'
        scores = "".join(
            f"<td>{case.criteria[k]:.2f}</td>" if k in case.criteria else "<td>—</td>" for k in keys
        )
        mark = {"pass": "✓", "fail": "✗", "none": "·"}[state]
        rows.append(
            f'<tr class="case" tabindex="0" aria-expanded="false" data-index="{index}" '
            f'data-case="{_e(case_id)}" data-state="{state}">'
            f"<td>{_e(case_id)}{badge}</td>"
            f'<td class="{"pass" if state == "pass" else "fail"}">{mark} '
            f"{case.passed}/{case.evaluated}</td>"
            f"<td>{_e(first.input[:120])}</td>"
            f"<td>{_e(', '.join(sorted(case.terminations)))}</td>{scores}"
            f"<td>{case.tokens:,}</td><td>{_money(case.cost_usd)}</td>"
            f"<td>{_secs(case.latency_p50_s)}</td></tr>"
        )
        expected = (
            ""
            if first.expected is None
            else '<div class="muted">expected</div>'
            f"<pre>{_e(json.dumps(first.expected, ensure_ascii=False))}</pre>"
        )
        change = ""
        if delta is not None:
            moved = ", ".join(
                f"{k}: {'—' if b is None else f'{b:.2f}'} → {'—' if a is None else f'{a:.2f}'}"
                for k, (b, a) in delta.criteria.items()
            )
            change = (
                f'<div class="muted">vs baseline: pass rate {_pct(delta.pass_rate_before)} → '
                f"{_pct(delta.pass_rate_after)}{'; ' + _e(moved) if moved else ''}</div>"
            )
        rows.append(
            f'<tr class="detail" id="detail-{index}" hidden><td colspan="{7 + len(keys)}">'
            f'<div class="muted">input</div><pre>{_e(first.input)}</pre>{expected}{change}'
            f"{''.join(_run_detail(r) for r in results)}</td></tr>"
        )
    status = "complete" if report.complete else f"incomplete: {_e(report.stopped)}"
    data = json.dumps(report.to_dict(), ensure_ascii=False, default=repr).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tether eval: {_e(report.agent)} on {_e(report.dataset)}</title>
<style>{_CSS}</style></head>
<body><header><h1>{_e(report.agent)} on {_e(report.dataset)}</h1>
<div class="sub">{len(report.case_ids())} cases × {report.repeat} · judges:
{_e(", ".join(report.judges) or "none")} · {status}</div></header>
<main><section class="cards">{_cards(agg, comparison)}</section>
<div class="toolbar"><input type="search" id="filter" placeholder="filter cases">
<label><input type="checkbox" id="failed-only"> failed only</label>
<span class="muted">click a case to open it</span></div>
<table id="cases"><thead><tr><th>case</th><th>passed</th><th>input</th><th>termination</th>
{head}<th>tokens</th><th>cost</th><th>latency</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table></main>
<script type="application/json" id="report-data">{data}</script>
<script>{_JS}</script></body></html>
"""
