"""The built-in plugin names the kernel uses: defaults, and who provides each.

The kernel runs no built-in plugin of its own; it only names some, as a default or in a message.
"""

from __future__ import annotations

from certlab_core.plugin.types.rule import DEFAULT_RULE as DEFAULT_RULE  # the contract's, named here too

KNOWN_PROVIDERS: dict[str, dict[str, str]] = {
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
