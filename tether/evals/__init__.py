"""Evals: run an agent over a dataset, judge every answer, report, compare.

See docs/guides/evals.md. ``tether.evals`` is not imported by ``import tether``::

    from tether.evals import Case, Dataset, ExactMatch, evaluate

    report = await evaluate(agent, Dataset.load("cases.jsonl"), judges=[ExactMatch()])
    print(report.aggregates().pass_rate)
    report.save("report.json")
"""

from ._dataset import Case as Case
from ._dataset import Dataset as Dataset
from ._dataset import DatasetError as DatasetError
from ._evaluate import EvalControl as EvalControl
from ._evaluate import OnResult as OnResult
from ._evaluate import evaluate as evaluate
from ._html import render_html as render_html
from ._judges import CaseJudge as CaseJudge
from ._judges import Contains as Contains
from ._judges import Evaluator as Evaluator
from ._judges import ExactMatch as ExactMatch
from ._judges import JsonEqual as JsonEqual
from ._judges import LLMRubric as LLMRubric
from ._judges import Verdict as Verdict
from ._report import Aggregates as Aggregates
from ._report import CaseDelta as CaseDelta
from ._report import CaseResult as CaseResult
from ._report import Comparison as Comparison
from ._report import EvalReport as EvalReport
from ._report import ReportError as ReportError
from ._report import Status as Status
from ._report import aggregate as aggregate
from ._report import criterion_key as criterion_key
from ._report import percentile as percentile

__all__ = [
    "Aggregates",
    "Case",
    "CaseDelta",
    "CaseJudge",
    "CaseResult",
    "Comparison",
    "Contains",
    "Dataset",
    "DatasetError",
    "EvalControl",
    "EvalReport",
    "Evaluator",
    "ExactMatch",
    "JsonEqual",
    "LLMRubric",
    "OnResult",
    "ReportError",
    "Status",
    "Verdict",
    "aggregate",
    "criterion_key",
    "evaluate",
    "percentile",
    "render_html",
]
