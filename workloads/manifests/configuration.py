"""Kueue's Configuration (`config.kueue.x-k8s.io`): the document its manager reads, one per cluster.

The parts the simulator acts on (waitForPodsReady, fairSharing, admissionFairSharing, the
feature gates it knows) are validated as Kueue's `pkg/config/validation.go` does and stored
with Kueue's defaults (`apis/config/v1beta2/defaults.go`); the rest (webhook, metrics,
integrations, ...) is type-checked and kept as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workloads.durations import MAX_DURATION_CHARS
from workloads.manifests.fields import Fields, join, label_key_problem, show

CONFIG_VERSIONS = ("config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2")
CONFIG_STORAGE_VERSION = "config.kueue.x-k8s.io/v1beta2"
CONFIGURATION_NAME = "default"
"""Its name when the document has no metadata (Kueue's own file has none)."""
MAX_DURATION = 366 * 86400.0
"""Our bound on every duration (Kueue takes any Go duration)."""
MAX_FEATURE_GATES = 128
MAX_RESOURCE_WEIGHTS = 64
# Kueue's defaults (apis/config/v1beta2/defaults.go).
DEFAULT_TIMEOUT = 30 * 60.0
DEFAULT_BACKOFF_BASE = 60
DEFAULT_BACKOFF_MAX = 3600
DEFAULT_SAMPLING_INTERVAL = 5 * 60.0
TIMESTAMPS = ("Eviction", "Creation")
# pkg/config/validation.go `validStrategySets`: the only lists Kueue accepts.
STRATEGY_SETS = (
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
)
# Top-level fields the simulator does not act on: checked to be of the right JSON type, kept.
_KEPT: dict[str, type] = {
    "namespace": str,
    "webhook": dict,
    "leaderElection": dict,
    "metrics": dict,
    "health": dict,
    "pprofBindAddress": str,
    "controller": dict,
    "tls": dict,
    "manageJobsWithoutQueueName": bool,
    "managedJobsNamespaceSelector": dict,
    "internalCertManagement": dict,
    "clientConnection": dict,
    "integrations": dict,
    "multiKueue": dict,
    "resources": dict,
    "objectRetentionPolicies": dict,
    "visibilityServer": dict,
}
_READ = frozenset({"waitForPodsReady", "fairSharing", "admissionFairSharing", "featureGates"})
_TOP = frozenset({"apiVersion", "kind", "metadata"}) | _READ | frozenset(_KEPT)
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def configuration_spec(fields: Fields, api_version: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The normal form: what the simulator reads, defaults written out, the rest as written."""
    fields.known_keys(body, _TOP, "")
    v1beta1 = api_version.endswith("/v1beta1")
    gates = _feature_gates(fields, body)
    kept = {}
    for key, kind in _KEPT.items():
        if body.get(key) is not None:
            if not isinstance(body[key], kind):
                expected = {dict: "a mapping", str: "a string", bool: "a boolean"}[kind]
                raise fields.error(key, body[key], f"{show(body[key])} is not {expected}")
            kept[key] = body[key]
    return {
        "wait_for_pods_ready": _wait_for_pods_ready(fields, body, gates, v1beta1),
        "fair_sharing": _fair_sharing(fields, body, v1beta1),
        "admission_fair_sharing": _admission_fair_sharing(fields, body),
        "feature_gates": gates,
        "kept": kept,
    }


def _feature_gates(fields: Fields, body: Mapping[str, Any]) -> dict[str, bool]:
    gates = fields.mapping(body, "featureGates", "")
    if len(gates) > MAX_FEATURE_GATES:
        raise fields.error("featureGates", len(gates), f"at most {MAX_FEATURE_GATES} gates")
    for name, value in gates.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,99}", name):
            raise fields.error(join("featureGates", name), name, "is not a feature gate name")
        if not isinstance(value, bool):
            raise fields.error(join("featureGates", name), value, f"{show(value)} is not a boolean")
    return dict(gates)


def _wait_for_pods_ready(
    fields: Fields, body: Mapping[str, Any], gates: Mapping[str, bool], v1beta1: bool
) -> dict[str, Any]:
    base = "waitForPodsReady"
    raw = fields.optional_mapping(body, base, "")
    known = {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
    fields.known_keys(raw or {}, frozenset(known | ({"enable"} if v1beta1 else set())), base)
    wfpr = raw or {}
    if v1beta1:
        # v1beta1: off unless `enable`, and blockAdmission then defaults to true.
        enabled = fields.boolean(wfpr, "enable", base, default=False)
        block_default = enabled
    else:
        # v1beta2 (waitforpodsready.Enabled): on unless the DisableWaitForPodsReady gate.
        enabled = not gates.get("DisableWaitForPodsReady", False)
        block_default = False
    timeout = _duration(fields, wfpr, "timeout", base) or DEFAULT_TIMEOUT
    recovery = _duration(fields, wfpr, "recoveryTimeout", base)
    strategy = fields.mapping(wfpr, "requeuingStrategy", base)
    path = join(base, "requeuingStrategy")
    fields.known_keys(
        strategy,
        frozenset({"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}),
        path,
    )
    return {
        "enable": enabled,
        "timeout": timeout,
        # Defaults to timeout; "0s" disables it.
        "recovery_timeout": timeout if recovery is None else recovery,
        "block_admission": fields.boolean(wfpr, "blockAdmission", base, default=block_default),
        "requeuing_strategy": {
            "timestamp": fields.choice(strategy, "timestamp", path, TIMESTAMPS, default="Eviction"),
            "backoff_limit_count": fields.optional_integer(strategy, "backoffLimitCount", path),
            # cmp.Or: 0 means unset, as in Kueue.
            "backoff_base_seconds": fields.optional_integer(strategy, "backoffBaseSeconds", path)
            or DEFAULT_BACKOFF_BASE,
            "backoff_max_seconds": fields.optional_integer(strategy, "backoffMaxSeconds", path)
            or DEFAULT_BACKOFF_MAX,
        },
    }


def _fair_sharing(fields: Fields, body: Mapping[str, Any], v1beta1: bool) -> dict[str, Any] | None:
    """None when off: v1beta2 turns it on by its presence, v1beta1 by `enable`."""
    raw = fields.optional_mapping(body, "fairSharing", "")
    if raw is None:
        return None
    known = {"preemptionStrategies"} | ({"enable"} if v1beta1 else set())
    fields.known_keys(raw, frozenset(known), "fairSharing")
    if v1beta1 and not fields.boolean(raw, "enable", "fairSharing", default=False):
        return None
    path = "fairSharing.preemptionStrategies"
    strategies = tuple(fields.strings(raw, "preemptionStrategies", "fairSharing"))
    if not strategies and v1beta1:
        strategies = STRATEGY_SETS[2]  # v1beta1's default
    if not strategies:
        raise fields.error(path, None, "must be specified")
    if strategies not in STRATEGY_SETS:
        allowed = "; ".join(", ".join(s) for s in STRATEGY_SETS)
        raise fields.error(path, list(strategies), f"is not one of the supported lists: {allowed}")
    return {"preemption_strategies": list(strategies)}


def _admission_fair_sharing(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any] | None:
    base = "admissionFairSharing"
    raw = fields.optional_mapping(body, base, "")
    if raw is None:
        return None
    fields.known_keys(
        raw, frozenset({"usageHalfLifeTime", "usageSamplingInterval", "resourceWeights"}), base
    )
    sampling = _duration(fields, raw, "usageSamplingInterval", base) or DEFAULT_SAMPLING_INTERVAL
    weights = fields.mapping(raw, "resourceWeights", base)
    if len(weights) > MAX_RESOURCE_WEIGHTS:
        raise fields.error(
            join(base, "resourceWeights"), len(weights), f"at most {MAX_RESOURCE_WEIGHTS} resources"
        )
    for resource, weight in weights.items():
        path = join(join(base, "resourceWeights"), resource)
        problem = label_key_problem(resource, "resource name")
        if problem:
            raise fields.error(path, resource, problem)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise fields.error(path, weight, f"{show(weight)} is not a number")
        if weight < 0:
            raise fields.error(path, weight, "must not be negative")
    return {
        "usage_half_life_time": _duration(fields, raw, "usageHalfLifeTime", base) or 0.0,
        "usage_sampling_interval": sampling,
        "resource_weights": {k: float(v) for k, v in weights.items()},
    }


def _duration(fields: Fields, parent: Mapping[str, Any], key: str, base: str) -> float | None:
    """A Go duration string (metav1.Duration: "30m", "1h30m", "90s", "0s") in seconds."""
    value = parent.get(key)
    if value is None:
        return None
    path = join(base, key)
    if not isinstance(value, str):
        raise fields.error(path, value, f"{show(value)} is not a duration string such as '30m'")
    if len(value) > MAX_DURATION_CHARS:
        shown = value[:MAX_DURATION_CHARS] + "…"
        raise fields.error(path, shown, f"is longer than {MAX_DURATION_CHARS} characters")
    text = value[1:] if value.startswith(("-", "+")) else value
    parts = _GO_DURATION.findall(text)
    if text != "0" and (not parts or "".join(n + u for n, u in parts) != text):
        raise fields.error(path, value, f"{value!r} is not a duration (examples: 90s, 30m, 1h30m)")
    seconds = sum(float(number) * _GO_UNITS[unit] for number, unit in parts)
    if value.startswith("-") and seconds:
        raise fields.error(path, value, "must not be negative")
    if seconds > MAX_DURATION:
        raise fields.error(path, value, "must be at most 8784h (366 days)")
    return seconds


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String() for whole milliseconds: 30m0s, 1h0m0s, 1m30s, 500ms, 0s."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    text = f"{secs}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return text


def render_configuration(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The v1beta2 document Kueue's manager reads (no metadata: its strict decoder refuses it)."""
    wfpr = spec["wait_for_pods_ready"]
    requeuing = wfpr["requeuing_strategy"]
    strategy: dict[str, Any] = {
        "timestamp": requeuing["timestamp"],
        "backoffBaseSeconds": requeuing["backoff_base_seconds"],
        "backoffMaxSeconds": requeuing["backoff_max_seconds"],
    }
    if requeuing["backoff_limit_count"] is not None:
        strategy["backoffLimitCount"] = requeuing["backoff_limit_count"]
    out: dict[str, Any] = {
        "apiVersion": CONFIG_STORAGE_VERSION,
        "kind": "Configuration",
        **spec["kept"],
        "waitForPodsReady": {
            "timeout": format_duration(wfpr["timeout"]),
            "recoveryTimeout": format_duration(wfpr["recovery_timeout"]),
            "blockAdmission": wfpr["block_admission"],
            "requeuingStrategy": strategy,
        },
    }
    if spec["fair_sharing"] is not None:
        out["fairSharing"] = {
            "preemptionStrategies": list(spec["fair_sharing"]["preemption_strategies"])
        }
    afs = spec["admission_fair_sharing"]
    if afs is not None:
        out["admissionFairSharing"] = {
            "usageHalfLifeTime": format_duration(afs["usage_half_life_time"]),
            "usageSamplingInterval": format_duration(afs["usage_sampling_interval"]),
        }
        if afs["resource_weights"]:
            out["admissionFairSharing"]["resourceWeights"] = dict(afs["resource_weights"])
    gates = dict(spec["feature_gates"])
    if not wfpr["enable"]:
        gates["DisableWaitForPodsReady"] = True  # how v1beta2 says v1beta1's `enable: false`
    if gates:
        out["featureGates"] = gates
    return out


def default_configuration() -> dict[str, Any]:
    """The normal form of a cluster with no Configuration applied: Kueue's v1beta2 defaults."""
    return configuration_spec(
        Fields("defaults", None, None),
        CONFIG_STORAGE_VERSION,
        {"apiVersion": CONFIG_STORAGE_VERSION, "kind": "Configuration"},
    )
