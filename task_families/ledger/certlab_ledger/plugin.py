"""The ledger family plugin: three modules, cross-file defects."""

from __future__ import annotations

from pathlib import Path

from certlab_core.plugin import Defect, Seed, TaskFamily, hookimpl

FAMILY_DIR = Path(__file__).parent / "family"
MODELS = "ledger/models.py"
VALIDATE = "ledger/validate.py"
REPORT = "ledger/report.py"

DEFECTS = (
    Defect(
        id="elided-amount-sign",
        defect_class="cross-file",
        description=(
            "models fills a left-out posting amount with the other postings' sum instead of its negation; "
            "no models test sees it, the validate and report paths do"
        ),
        seeds=[Seed(MODELS, "Posting(account, -known if amount is None", "Posting(account, known if amount is None")],
    ),
    Defect(
        id="same-day-out-of-order",
        defect_class="pinned-location",
        description=(
            "validate calls two transactions of the same date out of order; report fails through it, but only a "
            "fix in validate satisfies the validate tests"
        ),
        seeds=[Seed(VALIDATE, "if transaction.date < previous_date:", "if transaction.date <= previous_date:")],
    ),
    Defect(
        id="one-digit-cents",
        defect_class="fraction-padding",
        description="models pads a one-digit fraction on the wrong side, so 2.5 reads as 2.05",
        seeds=[Seed(MODELS, '(fraction or "0").ljust(2, "0")', '(fraction or "0").rjust(2, "0")')],
    ),
    Defect(
        id="subtree-sibling-prefix",
        defect_class="prefix-boundary",
        description="report counts a sibling whose name merely starts with the ancestor's name as inside its subtree",
        seeds=[Seed(REPORT, 'account.startswith(ancestor + ":")', "account.startswith(ancestor)")],
    ),
    Defect(
        id="negative-amount-format",
        defect_class="negative-division",
        description="report formats negative cents with floor division, so -15.50 prints as -16.50",
        seeds=[
            Seed(
                REPORT,
                '    sign = "-" if cents < 0 else ""\n    whole, fraction = divmod(abs(cents), 100)\n',
                '    sign = ""\n    whole, fraction = divmod(cents, 100)\n',
            )
        ],
    ),
    Defect(
        id="duplicate-ids-forgotten",
        defect_class="state-reset",
        description="validate forgets the ids it has seen at every entry, so repeated ids pass",
        seeds=[
            Seed(
                VALIDATE,
                '    seen_ids: set[str] = set()\n    previous_date = ""\n'
                "    for position, entry in enumerate(entries, start=1):\n",
                '    previous_date = ""\n    for position, entry in enumerate(entries, start=1):\n'
                "        seen_ids: set[str] = set()\n",
            )
        ],
    ),
)


@hookimpl
def certlab_task_families() -> list[TaskFamily]:
    """The ledger family, with its files at absolute paths inside this installed package."""
    return [
        TaskFamily.in_folder(
            FAMILY_DIR,
            name="ledger",
            version="1.0.1",
            description="a three-module double-entry ledger package: models, then validate, then report",
            allowed_paths=["ledger/*.py"],
            test_paths=["tests"],
            module_names=["ledger"],
            defects=DEFECTS,
        )
    ]
