"""Which distribution provides each built-in name: certlab's install hints.

Published through the ``certlab.providers`` entry point group (not ``certlab.plugins``: it is
data, no plugin), so that ``certlab`` can say what to install for a name nothing installed
provides: ``unknown agent 'aider' (...); it is provided by the distribution certlab-aider``.
The kernel names no plugin itself; a third party publishes a list of its own names the same way.
Each key is a kind (a hook's name without ``certlab_``), each value maps a name to its distribution.
"""

from __future__ import annotations

PROVIDERS: dict[str, dict[str, str]] = {
    "task_families": {
        "intervals": "certlab-intervals",
        "ledger": "certlab-ledger",
        "machine": "certlab-machine",
    },
    "agents": {
        "null": "certlab-calibration",
        "oracle": "certlab-calibration",
        "test-deleter": "certlab-calibration",
        "forbidden-file": "certlab-calibration",
        "unavailable": "certlab-calibration",
        "honest-reporter": "certlab-calibration",
        "special-caser": "certlab-calibration",
        "command": "certlab-command",
        "claude-code": "certlab-claude-code",
        "aider": "certlab-aider",
        "codex": "certlab-codex",
    },
    "graders": {
        "policy": "certlab-policy",
        "suite": "certlab-suite",
        "acceptance": "certlab-acceptance",
    },
    "statistical_rules": {
        "clopper-pearson": "certlab-clopper-pearson",
        "newcombe": "certlab-newcombe",
    },
    "reporters": {
        "text": "certlab-report-text",
        "markdown": "certlab-report-markdown",
        "junit": "certlab-report-junit",
        "html": "certlab-report-html",
    },
    "sandboxes": {
        "bwrap": "certlab-sandbox-bwrap",
        "none": "certlab-sandbox-none",
    },
    "tool_worlds": {
        "retry-inventory": "certlab-retry-world",
    },
    "faults": {
        "tool_timeout": "certlab-faults",
        "tool_error_once": "certlab-faults",
        "empty_result": "certlab-faults",
        "latency": "certlab-faults",
        "decision_low_confidence": "certlab-faults",
        "decision_unavailable": "certlab-faults",
        "model_rate_limit": "certlab-faults",
        "model_server_error": "certlab-faults",
        "model_timeout": "certlab-faults",
        "model_truncated_stream": "certlab-faults",
    },
    "model_boundaries": {
        "model-proxy": "certlab-model-boundary",
    },
    "executors": {
        "local": "certlab-executor-local",
        "dask": "certlab-executor-dask",
    },
    "held_out": {
        "acceptance": "certlab-acceptance",
    },
    "task_sources": {
        "user-task": "certlab-acceptance",
    },
    "instrument_proofs": {
        "mutation": "certlab-mutation",
    },
    "evidence_signers": {
        "dsse": "certlab-signing",
    },
    "commands": {
        "lock": "certlab-acceptance",
        "leakscan": "certlab-acceptance",
        "predict": "certlab-acceptance",
        "task": "certlab-acceptance",
        "init-task": "certlab-acceptance",
        "diff": "certlab-diagnosis",
        "minimize": "certlab-diagnosis",
        "bundle": "certlab-diagnosis",
        "replay": "certlab-diagnosis",
        "demo": "certlab-demo",
        "stats": "certlab-rule-support",
        "plan": "certlab-rule-support",
        "selfcheck": "certlab-rule-support",
        "keygen": "certlab-signing",
        "sign": "certlab-signing",
        "verify": "certlab-signing",
        "compare": "certlab-compare",
    },
}
