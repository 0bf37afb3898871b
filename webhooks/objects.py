"""The Kubernetes objects dynmig reads, as typed and bounded models of exactly the fields it reads.

Unknown fields are ignored (a real pod carries hundreds); known ones are strict about their types,
so a `name: 7` or `annotations: []` is refused with its JSON path instead of reaching code that
expects a string or a map. Lengths are capped where Kubernetes caps them (names 253, label values
63, annotations 256 KiB in total) or, for lists, well above any real object, so hostile input costs
bounded work. `check(model, data, where)` returns the model or raises `ObjectError` naming the path.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

MAX_NAME = 253
MAX_CONTAINERS = 64  # kube-apiserver has no hard limit; real pods have a handful
MAX_MAP_ENTRIES = 512
MAX_ANNOTATION_VALUE = 256 * 1024  # Kubernetes' limit for all annotations of an object together
MAX_NODE_NAMES = 15_000  # kube-scheduler's documented cluster size is 5,000 nodes
MAX_TEXT = 64 * 1024

Name = Annotated[StrictStr, Field(max_length=MAX_NAME)]
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT)]
QuantityValue = StrictStr | StrictInt | StrictFloat  # the API sends strings; clients may send numbers
ResourceList = Annotated[
    dict[Annotated[StrictStr, Field(max_length=MAX_NAME)], QuantityValue], Field(max_length=MAX_MAP_ENTRIES)
]
StringMap = Annotated[
    dict[
        Annotated[StrictStr, Field(max_length=MAX_NAME)],
        Annotated[StrictStr, Field(max_length=MAX_ANNOTATION_VALUE)],
    ],
    Field(max_length=MAX_MAP_ENTRIES),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ObjectMeta(_Model):
    name: Name | None = None
    generateName: Name | None = None
    namespace: Name | None = None
    uid: Name | None = None
    resourceVersion: Name | None = None
    deletionTimestamp: Name | None = None
    annotations: StringMap | None = None
    labels: StringMap | None = None


class Resources(_Model):
    limits: ResourceList | None = None
    requests: ResourceList | None = None


class SecurityContext(_Model):
    privileged: StrictBool | None = None


class Container(_Model):
    name: Name | None = None
    resources: Resources | None = None
    securityContext: SecurityContext | None = None


Containers = Annotated[list[Container], Field(max_length=MAX_CONTAINERS)]


class PodSpec(_Model):
    schedulerName: Name | None = None
    nodeName: Name | None = None
    containers: Containers | None = None
    initContainers: Containers | None = None


class PodStatus(_Model):
    phase: Name | None = None


class Pod(_Model):
    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None
    status: PodStatus | None = None


class ConfigMap(_Model):
    metadata: ObjectMeta | None = None
    data: Annotated[dict[StrictStr, StrictStr], Field(max_length=MAX_MAP_ENTRIES)] | None = None


class NodeMeta(_Model):
    name: Name | None = None


class Node(_Model):
    metadata: NodeMeta | None = None


class ObjectError(ValueError):
    """An object whose known fields have the wrong type or size; the message names the JSON path."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def json_path(where: str, loc: tuple[int | str, ...]) -> str:
    """`where.a.b[0].c`; parts taken from the input (map keys) are shortened, never echoed whole."""
    out = where
    for part in loc:
        text = str(part) if len(str(part)) <= 64 else str(part)[:64] + "…"
        out += f"[{text}]" if isinstance(part, int) else f".{text}"
    return out


_PROBLEMS = {
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "int_type": "must be a number",
    "float_type": "must be a number",
    "too_long": "is too long",
    "string_too_long": "is too long",
    "model_attributes_type": "must be an object",
}

M = TypeVar("M", bound=BaseModel)


def check(model: type[M], data: Any, where: str) -> M:
    """`data` as `model`, or ObjectError naming the first wrong field (never echoing its value)."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_input=False, include_url=False)[0]
        loc = tuple(first["loc"])
        if loc and loc[-1] in ("str", "int", "float"):  # a union (quantities) tags its member types
            loc = loc[:-1]
        problem = _PROBLEMS.get(first["type"], first["msg"])
        if first["type"] in ("too_long", "string_too_long"):
            limit = (first.get("ctx") or {}).get("max_length")
            problem = f"is too long (the limit is {limit})" if limit is not None else problem
        raise ObjectError(json_path(where, loc), problem) from None
