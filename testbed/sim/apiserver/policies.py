"""ValidatingAdmissionPolicy + ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1),
evaluated in the API server with CEL as kube-apiserver does, after the mutating webhooks and before
the validating webhooks.

For every request: each binding (by name) whose policy exists and whose policy's `matchConstraints`
and the binding's `matchResources` select the request (resourceRules with resourceNames,
excludeResourceRules, namespaceSelector, objectSelector) runs the policy's `matchConditions` (any
false: skip), then its `validations`. A false validation is a failure with its `messageExpression`,
`message` or `failed expression: <expr>`; an evaluation error is a failure when `failurePolicy` is
Fail (the default) and is ignored when Ignore. Each failure goes through the binding's
`validationActions`: Deny rejects (the first one, with the real server's wording and its reason's
code), Warn adds a `Warning` header, Audit is ignored here (there is no audit log).

Not simulated: `paramKind`/`paramRef` (a policy with paramKind fails to evaluate, and its
failurePolicy decides), `auditAnnotations`, `authorizer`, type checking and the policy status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.apiserver import cel
from sim.apiserver.attributes import Attributes, object_selector_matches, rule_matches
from sim.apiserver.errors import forbidden, invalid
from sim.apiserver.resources import ResourceType

POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"
REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


@dataclass
class Failure:
    """One failed validation (or evaluation error under failurePolicy Fail)."""

    message: str
    reason: str = "Invalid"


class Policies:
    """Evaluates the stored policies and bindings for one admission request at a time."""

    def __init__(
        self,
        list_objects: Callable[[str], list[dict[str, Any]]],
        namespace_object: Callable[[str], dict[str, Any] | None],
        namespace_matches: Callable[[dict[str, Any], Attributes], bool],
    ):
        self._list = list_objects
        self._namespace_object = namespace_object
        self._namespace_matches = namespace_matches

    def validate(self, a: Attributes, request: dict[str, Any]) -> list[str]:
        """Warnings to return to the client; raises ApiError for the first Deny."""
        policies = {p["metadata"]["name"]: p for p in self._list(POLICIES)}
        if not policies:
            return []
        warnings: list[str] = []
        denied: list[tuple[str, str, Failure]] = []
        for binding in sorted(self._list(BINDINGS), key=lambda b: b["metadata"]["name"]):
            spec = binding.get("spec") or {}
            policy = policies.get(str(spec.get("policyName") or ""))
            if policy is None or not self._selected(policy, spec, a):
                continue
            pname, bname = policy["metadata"]["name"], binding["metadata"]["name"]
            for failure in self._failures(policy, a, request):
                actions = spec.get("validationActions") or []
                if "Deny" in actions:
                    denied.append((pname, bname, failure))
                if "Warn" in actions:
                    warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy '{pname}' with "
                        f"binding '{bname}': {failure.message}"
                    )
        if denied:
            pname, bname, failure = denied[0]
            message = (
                f"ValidatingAdmissionPolicy '{pname}' with binding '{bname}' denied request: "
                f"{failure.message}"
            )
            err = forbidden(
                a.rt.plural,
                a.rt.group,
                _name(a),
                message,
                failure.reason,
                REASON_CODES.get(failure.reason, 422),
            )
            err.details = {**(err.details or {}), "causes": [{"message": message}]}
            raise err
        return warnings

    # ---- selection -----------------------------------------------------------------------------
    def _selected(self, policy: dict[str, Any], binding_spec: dict[str, Any], a: Attributes) -> bool:
        constraints = (policy.get("spec") or {}).get("matchConstraints") or {}
        if not constraints.get("resourceRules") or not self._resources_match(constraints, a):
            return False
        return self._resources_match(binding_spec.get("matchResources") or {}, a)

    def _resources_match(self, mr: dict[str, Any], a: Attributes) -> bool:
        rules = mr.get("resourceRules")
        if rules and not any(_named_rule_matches(r, a) for r in rules):
            return False
        if any(_named_rule_matches(r, a) for r in mr.get("excludeResourceRules") or []):
            return False
        ns_sel = mr.get("namespaceSelector")
        if ns_sel and not self._namespace_matches(ns_sel, a):
            return False
        return object_selector_matches(mr.get("objectSelector"), a)

    # ---- evaluation ----------------------------------------------------------------------------
    def _failures(self, policy: dict[str, Any], a: Attributes, request: dict[str, Any]) -> list[Failure]:
        spec = policy.get("spec") or {}
        fail = (spec.get("failurePolicy") or "Fail") != "Ignore"
        if spec.get("paramKind"):
            why = "paramKind is not supported by the simulated API server"
            return [Failure(why)] if fail else []
        ns_obj = self._namespace_object(a.namespace) if a.rt.namespaced and a.namespace else None
        base = {
            "object": a.obj,
            "oldObject": a.old,
            "request": cel.request_of(request),
            "params": None,
            "namespaceObject": ns_obj,
        }
        variables = cel.Variables(spec.get("variables") or [], lambda: base)
        matched, error = _conditions(spec.get("matchConditions") or [], variables)
        if error is not None:
            return [Failure(error)] if fail else []
        if not matched:
            return []
        out: list[Failure] = []
        for v in spec.get("validations") or []:
            expr = str(v.get("expression", ""))
            try:
                ok = cel.evaluate_bool(expr, variables.activation_for(expr))
            except cel.CelError as exc:
                if fail:
                    out.append(Failure(variables.failure_in(expr) or str(exc)))
                continue
            if not ok:
                out.append(Failure(_message(v, variables), str(v.get("reason") or "Invalid")))
        return out


def _conditions(conditions: list[dict[str, Any]], variables: cel.Variables) -> tuple[bool, str | None]:
    """(all true, the error when some failed to evaluate and none was false)."""
    errors: list[str] = []
    for cond in conditions:
        expr = str(cond.get("expression", ""))
        try:
            if not cel.evaluate_bool(expr, variables.activation_for(expr)):
                return False, None
        except cel.CelError as exc:
            errors.append(variables.failure_in(expr) or str(exc))
    if errors:
        return False, errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return True, None


def _message(validation: dict[str, Any], variables: cel.Variables) -> str:
    """messageExpression when it yields a non-empty one-line string, else message, else the
    expression itself (the real server's fallbacks)."""
    mexpr = validation.get("messageExpression")
    if mexpr:
        try:
            text = cel.evaluate(str(mexpr), variables.activation_for(str(mexpr)))
        except cel.CelError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text.strip():
            return text.strip()
    if str(validation.get("message") or "").strip():
        return str(validation["message"]).strip()
    return f"failed expression: {str(validation.get('expression', '')).strip()}"


def _named_rule_matches(rule: dict[str, Any], a: Attributes) -> bool:
    names = rule.get("resourceNames") or []
    if names and _name(a) not in names:
        return False
    return rule_matches(rule, a)


def _name(a: Attributes) -> str:
    return a.name or str(((a.obj or a.old or {}).get("metadata") or {}).get("name") or "")


# ---- checks on create/update of the configuration objects ----------------------------------------
def check_config(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Reject admission configuration whose CEL does not compile, or a binding the real server
    would refuse, with 422 Invalid naming the field (the real server's strategy validation)."""
    if rt.group != "admissionregistration.k8s.io":
        return
    name = (obj.get("metadata") or {}).get("name", "")
    fields: list[tuple[str, Any]] = []
    if rt.plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for i, hook in enumerate(obj.get("webhooks") or []):
            fields += _exprs(f"webhooks[{i}].matchConditions", hook.get("matchConditions"))
    elif rt.plural == POLICIES:
        spec = obj.get("spec") or {}
        for key in ("matchConditions", "variables"):
            fields += _exprs(f"spec.{key}", spec.get(key))
        for i, v in enumerate(spec.get("validations") or []):
            fields.append((f"spec.validations[{i}].expression", v.get("expression")))
            if v.get("messageExpression"):
                fields.append((f"spec.validations[{i}].messageExpression", v.get("messageExpression")))
    elif rt.plural == BINDINGS:
        _check_binding(rt, name, obj.get("spec") or {})
    for path, expr in fields:
        try:
            cel.compile_expression(str(expr or ""))
        except cel.CelError as exc:
            raise invalid(rt.kind, rt.group, name, path, f"Invalid value: {expr!r}: {exc}") from exc


def _exprs(prefix: str, items: Any) -> list[tuple[str, Any]]:
    return [(f"{prefix}[{i}].expression", item.get("expression")) for i, item in enumerate(items or [])]


def _check_binding(rt: ResourceType, name: str, spec: dict[str, Any]) -> None:
    if not spec.get("policyName"):
        raise invalid(rt.kind, rt.group, name, "spec.policyName", "Required value")
    actions = spec.get("validationActions") or []
    if not actions:
        raise invalid(rt.kind, rt.group, name, "spec.validationActions", "Required value")
    unknown = [x for x in actions if x not in ("Deny", "Warn", "Audit")]
    if unknown:
        raise invalid(
            rt.kind,
            rt.group,
            name,
            "spec.validationActions",
            f'Unsupported value: "{unknown[0]}": supported values: "Audit", "Deny", "Warn"',
        )
    if "Deny" in actions and "Warn" in actions:
        raise invalid(
            rt.kind,
            rt.group,
            name,
            "spec.validationActions",
            "Invalid value: [Deny Warn]: must not contain both Deny and Warn (repeating the same "
            "validation failure information in the API response and headers serves no purpose)",
        )


__all__ = ["Policies", "check_config"]
